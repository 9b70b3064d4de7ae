"""The registry's database: engine, tables, the only SQL, migrations, and room on disk."""
