"""Settings, read from `SHELLGATE_*` environment variables or `.env`.

There is deliberately no module-level instance: `create_app(settings)` receives one, so tests
build as many differently-configured apps as they need.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.core.host_globs import check_host_glob

Role = Literal["agent", "approver", "admin"]
ROLES: tuple[Role, ...] = ("agent", "approver", "admin")
OWNER_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
VARIABLE_GLOB = re.compile(r"[A-Za-z0-9_*?\[\]!-]{1,256}")
MIN_SECRET_LENGTH = 16
# Credentials a command has no business reading, hidden from every command by default
# (docs/sandbox.md); sockets that hand out the host (docker) or the database (postgresql).
DEFAULT_SANDBOX_HIDDEN = (
    "~/.ssh",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.kube",
    "~/.gnupg",
    "~/.netrc",
    "~/.docker/config.json",
    "~/.git-credentials",
    "~/.pgpass",
    "~/.npmrc",
    "~/.pypirc",
    "~/.config/gh",
    "~/.cargo/credentials.toml",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.vault-token",
    "~/.gem/credentials",
    "~/.config/rclone",
    "~/.password-store",
    "~/.config/op",
    "~/.local/share/keyrings",
    "~/.config/glab-cli",
    "~/.config/hub",
    "~/.config/containers/auth.json",
    "~/.dockercfg",
    "~/.config/doctl",
    "~/.config/hcloud",
    "~/.fly",
    "~/.oci",
    "~/.s3cfg",
    "~/.boto",
    "~/.databrickscfg",
    "~/.kaggle",
    "~/.m2/settings.xml",
    "~/.m2/settings-security.xml",
    "~/.gradle/gradle.properties",
    "~/.yarnrc.yml",
    "~/.composer/auth.json",
    "~/.config/composer/auth.json",
    "~/.cache/huggingface/token",
    "~/.huggingface/token",
    # Coding agents' own sign-ins: the operator's account, not the agent's to use.
    "~/.codex",
    "~/.claude/.credentials.json",
    "~/.claude.json",
    "~/.gemini",
    "~/.config/github-copilot",
    # Browsers' profiles (cookies are signed-in sessions) on a workstation running `make run`.
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    # Histories: where secrets typed or pasted on a command line end up.
    "~/.bash_history",
    "~/.zsh_history",
    "~/.local/share/fish/fish_history",
    "~/.python_history",
    "~/.node_repl_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.rediscli_history",
    # Readable by a root server's commands otherwise (the user namespace keeps uid 0 for files).
    "/etc/shadow",
    "/etc/gshadow",
    # Sockets that take a peer for the user it runs as (its uid, from the kernel, is the
    # server's whatever the namespaces) and reach past the sandbox: a container runtime, a
    # database's peer or socket login, the service manager and the buses it answers on (start
    # a unit: a command run outside), a user's own runtime directory (its systemd and D-Bus,
    # its ssh and gpg agents, rootless podman). No network namespace covers a socket's path.
    "/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/run/crio",
    "/run/k3s",
    "/run/libvirt",
    "/run/snapd.socket",
    "/run/postgresql",
    "/run/mysqld",
    "/run/redis",
    "/run/dbus",
    "/run/systemd/private",
    "/run/user",
)

# What only root may read on most hosts, hidden too when the server runs as root: its commands
# have uid 0 on the host's files (with every capability dropped they pass no other user's
# permissions, but root's own files are theirs), and a server run as another user cannot
# read these anyway (docs/sandbox.md#what-remains-outside). The host's keys (sshd's, TLS's),
# cluster administrators' credentials, VPN and Wi-Fi secrets, the Kerberos keytab, the
# password hashes' backups, and other containers' filesystems.
ROOT_SANDBOX_HIDDEN = (
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/letsencrypt",
    "/etc/kubernetes",
    "/etc/rancher",
    "/var/lib/rancher",
    "/var/lib/kubelet/pki",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/ipsec.secrets",
    "/etc/krb5.keytab",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/var/backups",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/containers",
)


def default_sandbox_hidden() -> list[str]:
    """`SHELLGATE_SANDBOX_HIDDEN` unless set: the credential stores, and for a root server
    what only root may read besides."""
    return [*DEFAULT_SANDBOX_HIDDEN, *(ROOT_SANDBOX_HIDDEN if os.geteuid() == 0 else ())]


# The server's variables that hold or point at credentials, as case-insensitive globs: none
# reaches a command unless `SHELLGATE_COMMAND_ENV_PASS` names it (docs/api.md#the-process). An
# operator's `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`, `PGPASSWORD` or `DATABASE_URL` is not
# every agent's.
DEFAULT_COMMAND_ENV_EXCLUDE = (
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*PASSWD*",
    "*PASSPHRASE*",
    "*CREDENTIAL*",
    "*_PWD",
    "*_AUTH",
    "*_AUTH_*",
    "*DATABASE_URL*",
    "*_DSN",
    # A personal access token (`GITHUB_PAT`, `AZURE_DEVOPS_EXT_PAT`); `*PAT*` would take `PATH`.
    "*_PAT",
    "*_PAT_*",
    # A webhook's URL is its credential (`SLACK_WEBHOOK_URL`: anyone holding it may post).
    "*WEBHOOK*",
    "*COOKIE*",
    "GPG_AGENT_INFO",
)
# What a command inherits of the server's environment before those are dropped.
CommandInherit = Literal["all", "core", "none"]


class TokenEntry:
    """One configured bearer token: `name:role:secret`."""

    __slots__ = ("name", "role", "secret")

    def __init__(self, name: str, role: Role, secret: str) -> None:
        self.name = name
        self.role = role
        self.secret = secret

    def __repr__(self) -> str:  # never print secrets
        return f"TokenEntry(name={self.name!r}, role={self.role!r})"


def parse_tokens(raw: str) -> list[TokenEntry]:
    """Entries are named by position in every message: a misplaced field could be a secret."""
    entries: list[TokenEntry] = []
    items = [part.strip() for part in raw.split(",") if part.strip()]
    for position, item in enumerate(items, start=1):
        where = f"SHELLGATE_TOKENS entry {position}"
        pieces = item.split(":", 2)
        if len(pieces) != 3:
            raise ValueError(f"{where} is not name:role:secret")
        name, role, secret = pieces
        if not OWNER_NAME.match(name):
            raise ValueError(f"{where}: the name must be 1-64 letters, digits or _.@-")
        if role not in ROLES:
            raise ValueError(f"{where}: unknown role; use agent, approver or admin")
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"{where}: the secret is shorter than {MIN_SECRET_LENGTH} characters")
        entries.append(TokenEntry(name, role, secret))
    secrets = [entry.secret for entry in entries]
    if len(set(secrets)) != len(secrets):
        raise ValueError("two SHELLGATE_TOKENS entries share a secret")
    return entries


def parse_notify_secrets(raw: str) -> dict[str, str]:
    """`name:secret,…`: the webhook signing secret of each token name (entries named by
    position in every message, never by their value)."""
    secrets: dict[str, str] = {}
    items = [part.strip() for part in raw.split(",") if part.strip()]
    for position, item in enumerate(items, start=1):
        name, _, secret = item.partition(":")
        if not OWNER_NAME.match(name) or not secret:
            raise ValueError(f"SHELLGATE_NOTIFY_SECRETS entry {position} is not name:secret")
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"SHELLGATE_NOTIFY_SECRETS entry {position}: the secret is shorter than "
                f"{MIN_SECRET_LENGTH} characters"
            )
        secrets[name] = secret
    return secrets


# The database URLs the server can use: SQLite (embedded) and PostgreSQL through psycopg 3.
SUPPORTED_DATABASE_SCHEMES = frozenset(
    {"sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg"}
)


def describe_settings_error(error: ValidationError) -> str:
    """One line per bad setting, naming it and the problem but never echoing the value (a
    pydantic error prints the input, which may be a token secret or a database password)."""
    lines = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        name = ".".join(str(part) for part in item["loc"]) or "settings"
        message = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"SHELLGATE_{name.upper()}: {message}" if item["loc"] else message)
    return "; ".join(lines)


class Settings(BaseSettings):
    # No setting is infinite or NaN (`inf` passes `gt=0`): every duration below ends up in a
    # timedelta, a timer or an answer's JSON, where infinity raises (the pruner's
    # `timedelta(days=inf)` failed every interval with a traceback).
    model_config = SettingsConfigDict(
        env_prefix="SHELLGATE_", env_file=".env", extra="ignore", frozen=True, allow_inf_nan=False
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    data_dir: Path = Field(default=Path("data"), validate_default=True)
    database_url: str | None = None
    workspace: Path = Field(default_factory=Path.cwd)
    tokens: str = Field(default="", repr=False)
    # Bearer JWTs from an OpenID Connect issuer beside the static tokens
    # (docs/api.md#identity-from-a-gateway): the issuer URL (its keys found by discovery), the
    # audience a token must name, the claims that carry the role and the owner name, and how
    # often a token naming an unknown key may make the server fetch the issuer's keys again.
    oidc_issuer: str = ""
    oidc_audience: str = ""
    oidc_role_claim: str = Field(default="shellgate_role", min_length=1)
    oidc_owner_claim: str = Field(default="sub", min_length=1)
    oidc_jwks_refresh_seconds: float = Field(default=60, gt=0, le=86400)
    policy_file: Path | None = None
    max_jobs: int = Field(default=32, ge=1, le=10_000)
    auto_background_ms: int = Field(default=30_000, ge=0, le=86_400_000)  # a day at most
    # A plain foreground call that ends within this is recorded with one database write (its
    # row kept meanwhile in an intent journal, see docs/operations.md); 0 writes every row at the
    # spawn.
    foreground_record_delay_ms: int = Field(default=500, ge=0, le=60_000)
    approval_timeout: float = Field(default=600, gt=0, le=30 * 86400)
    # Per owner: one agent filing approvals in a loop must not bury everyone else's.
    max_pending_approvals: int = Field(default=50, ge=1, le=100_000)
    # Approve and remember (docs/policy.md#remembered-decisions): the shortest and the longest
    # time a decision may be remembered.
    remember_min_seconds: float = Field(default=60, gt=0, le=365 * 86400)
    remember_max_seconds: float = Field(default=30 * 86400, gt=0, le=365 * 86400)
    # Open sessions one owner may have: each holds a row, a state directory and, while used, a
    # shell; they live until closed, so an agent that never closes them would grow without end.
    max_sessions: int = Field(default=100, ge=1, le=100_000)

    shell: str = "/bin/bash"
    max_command_bytes: int = Field(default=64 * 1024, ge=1, le=16 * 1024 * 1024)
    # 0 = only the 1..3600 s range applies.
    max_timeout: float = Field(default=0, ge=0, le=30 * 86400)
    kill_grace_seconds: float = Field(default=2.0, ge=0, le=60)
    # SIGTERM/SIGINT to exit, whatever is still open: running commands are killed and recorded,
    # waiting calls answered, sockets closed within this bound.
    shutdown_grace: float = Field(default=10.0, ge=1, le=600)
    # The stop's first step: new work refused, foreground calls whose command ends within this
    # many seconds answer as they would have. At most a tenth of the grace (`stop_drain`).
    shutdown_drain: float = Field(default=1.0, ge=0, le=60)
    # The largest file `PUT /v1/files` accepts (docs/api.md#files); larger uploads get 413.
    files_max_bytes: int = Field(default=1024 * 1024 * 1024, ge=0)
    artifact_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    retention_days: float = Field(default=7, gt=0, le=36_500)
    prune_interval_seconds: float = Field(default=3600, gt=0, le=7 * 86400)
    ws_ping_seconds: float = Field(default=20, gt=0, le=20)
    # An idle HTTP keep-alive connection is closed after this. Above a gateway's own idle cut
    # (nginx 60 s, AWS ALB 60 s) and a client pool's (httpx 5 s), so it is always the other
    # side that closes first: a server closing just as the client reuses the connection is a
    # request lost with a read error.
    keepalive_seconds: int = Field(default=75, ge=1, le=3600)
    # A request's line and headers must be complete this long after the connection opened or
    # the request began, else the connection is closed (a slow client holds nothing for good).
    head_timeout_seconds: float = Field(default=30, gt=0, le=3600)
    ws_ticket_seconds: float = Field(default=60, gt=0, le=3600)
    # permessage-deflate costs about a third of live stream throughput (bench/README.md);
    # worth turning on only for viewers on slow links.
    ws_compression: bool = False
    # Confinement (app/confinement.py): the backend (`auto` = the strongest the host gives) and
    # the server's per-execution limits, which requests may only lower; 0 = no limit.
    confinement: Literal["auto", "cgroup2", "cgroup1", "rlimit"] = "auto"
    # Keep the next command's shell started ahead inside its cgroups and its sandbox (cgroup
    # backends, or any with the sandbox on): joining them on the request's path waits for the
    # kernel, building the sandbox costs bwrap's start (app/confinement/standby.py).
    spawn_ahead: bool = True
    # How many such shells wait at once: one is ready while the next is being made, so calls
    # back to back do not outrun them (app/confinement/standby.py).
    spawn_ahead_shells: int = Field(default=2, ge=1, le=8)
    # How many nice levels below the server its commands run (app/process/priority.py): under
    # load the event loop goes first and the commands take what it leaves. Off by default: it
    # halves a PTY stream's rate when the machine is saturated (docs/operations.md).
    command_nice: int = Field(default=0, ge=0, le=19)
    # The kernel boundary around every command (docs/sandbox.md): `on` refuses to start when
    # bubblewrap cannot build it; `off` runs commands unsandboxed, and says so everywhere.
    sandbox: Literal["on", "off"] = "on"
    # Where bubblewrap is (Debian's package installs it here).
    sandbox_bwrap: str = "/usr/bin/bwrap"
    # The network a command has unless the policy says otherwise: `off` is a namespace with
    # loopback only (the server's port unreachable), `on` the host's, comma-separated
    # `host[:port]` globs those hosts through the server's proxy (docs/sandbox.md#network).
    sandbox_network: Annotated[Literal["on", "off"] | tuple[str, ...], NoDecode] = "off"
    # Paths no command may see besides the data dir, the token file and the policy file,
    # comma-separated; `~` is the server's home (docs/sandbox.md).
    sandbox_hidden: Annotated[list[str], NoDecode] = Field(default_factory=default_sandbox_hidden)
    limit_memory_mb: int | None = Field(default=None, ge=0)  # None: half the host (cgroups)
    limit_processes: int = Field(default=512, ge=0)
    limit_cpu_seconds: int = Field(default=0, ge=0)
    limit_file_size_mb: int = Field(default=0, ge=0)
    limit_open_files: int = Field(default=65536, ge=0)
    # All commands together, with a cgroup backend (docs/operations.md#confinement). None: what
    # the server's own cgroup and the host allow it, less a reserve for the server; 0: none.
    limit_total_memory_mb: int | None = Field(default=None, ge=0, le=1 << 40)
    limit_total_processes: int | None = Field(default=None, ge=0, le=4194304)
    root_path: str = ""
    # What a command inherits of the server's environment (docs/api.md#the-process): `all` of it,
    # the `core` variables (PATH, HOME, USER, LANG, …) or `none`, less the names the exclude
    # globs match (credentials by default) and values that are URLs with a password, plus
    # whatever the pass globs name. Case-insensitive comma-separated globs; `SHELLGATE_*` never
    # passes.
    command_env_inherit: CommandInherit = "all"
    command_env_exclude: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_COMMAND_ENV_EXCLUDE)
    )
    command_env_pass: Annotated[list[str], NoDecode] = Field(default_factory=list)
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    forwarded_allow_ips: str = "127.0.0.1"
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["text", "json"] = "text"
    # Several replicas on one PostgreSQL (README, "Several replicas"). The node id defaults to
    # one generated once and kept in the data dir (`node-id`); replicas sharing a data dir must
    # each set their own. The URL is where the other replicas reach this one; the secret
    # authenticates the requests they forward (without one, nothing is forwarded).
    node_id: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,64}$")
    node_url: str = ""
    cluster_secret: str = Field(default="", repr=False)
    node_timeout: float = Field(default=30, ge=1, le=3600)
    # Completion delivery (docs/api.md#completion-delivery): the URL globs a `notify_url` must
    # match, a default URL, the HMAC secrets (server-wide, and per token name), the retry window.
    notify_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    notify_url: str | None = None
    notify_secret: str = Field(default="", repr=False)
    notify_secrets: str = Field(default="", repr=False)  # name:secret,… (token names)
    notify_timeout_seconds: float = Field(default=10, gt=0, le=300)  # one attempt, in all
    notify_retry_seconds: float = Field(default=3600, ge=0, le=7 * 86400)  # window from the end
    notify_backoff_seconds: float = Field(default=1, gt=0, le=3600)  # first retry; doubles
    notify_backoff_max_seconds: float = Field(default=300, gt=0, le=86400)
    notify_per_host: int = Field(default=4, ge=1, le=1000)  # attempts in flight per receiver
    notify_ca_file: Path | None = None  # CA bundle for https receivers (default: the system's)
    # Approval events (docs/policy.md#hearing-of-prompts): every request and decision POSTed,
    # signed with SHELLGATE_NOTIFY_SECRET, to this URL (on SHELLGATE_NOTIFY_ALLOW).
    approval_notify_url: str | None = None
    # The server's address as people reach it (a gateway's, with its prefix): events link to
    # the console there. Empty: no links.
    public_url: str = ""
    # At most 30: clients (the SDK among them) take 60 s without a byte for a dead connection,
    # and gateways cut idle streams after 60 s; a rarer heartbeat would end healthy streams.
    sse_heartbeat_seconds: float = Field(default=15, gt=0, le=30)

    @field_validator("data_dir", "workspace", "policy_file", "notify_ca_file")
    @classmethod
    def _absolute_path(cls, value: Path | None) -> Path | None:
        # Resolved once, against the directory the server starts in: a relative path would
        # otherwise mean something else to every command that runs in another cwd (a session's
        # wrapper writes its state under data_dir from the session's own directory).
        return None if value is None else Path(os.path.abspath(os.path.expanduser(value)))

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str | None) -> str | None:
        # Checked here, not at the first connect: an unknown dialect or driver would end the
        # start in a traceback from deep inside SQLAlchemy.
        if value:
            scheme = value.partition(":")[0].lower()
            if scheme not in SUPPORTED_DATABASE_SCHEMES:
                raise ValueError(
                    "only sqlite:///<path> and postgresql://… (postgresql+psycopg://…) URLs "
                    "are supported"
                )
        return value

    @field_validator("command_env_exclude", "command_env_pass", mode="before")
    @classmethod
    def _split_name_globs(cls, value: object) -> object:
        if isinstance(value, str):
            return [glob.strip() for glob in value.split(",") if glob.strip()]
        return value

    @field_validator("command_env_exclude", "command_env_pass")
    @classmethod
    def _name_globs(cls, value: list[str]) -> list[str]:
        for glob in value:
            if not VARIABLE_GLOB.fullmatch(glob):
                raise ValueError(
                    f"{glob!r} is not a variable name glob (letters, digits, _, and * ? [ ])"
                )
        return value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value

    @field_validator("sandbox_network", mode="before")
    @classmethod
    def _read_sandbox_network(cls, value: object) -> object:
        if isinstance(value, str):
            word = value.strip().lower()
            if word in ("on", "off"):
                return word
            value = word.split(",")
        if isinstance(value, list | tuple):
            globs = [glob for glob in value if not isinstance(glob, str) or glob.strip()]
            if not globs:
                raise ValueError('"on", "off" or comma-separated host[:port] globs')
            return tuple(dict.fromkeys(check_host_glob(str(glob)) for glob in globs))
        return value

    @field_validator("sandbox_hidden", mode="before")
    @classmethod
    def _split_sandbox_hidden(cls, value: object) -> object:
        if isinstance(value, str):
            return [path.strip() for path in value.split(",") if path.strip()]
        return value

    @field_validator("sandbox_hidden")
    @classmethod
    def _absolute_hidden(cls, value: list[str]) -> list[str]:
        paths = [os.path.abspath(os.path.expanduser(path)) for path in value]
        if "/" in paths:
            raise ValueError("'/' cannot be hidden: commands need a root to run from")
        return paths

    @field_validator("notify_allow", mode="before")
    @classmethod
    def _split_notify_allow(cls, value: object) -> object:
        if isinstance(value, str):
            return [glob.strip() for glob in value.split(",") if glob.strip()]
        return value

    @field_validator("notify_secret")
    @classmethod
    def _notify_secret_length(cls, value: str) -> str:
        if value and len(value) < MIN_SECRET_LENGTH:
            raise ValueError(f"the secret is shorter than {MIN_SECRET_LENGTH} characters")
        return value

    @field_validator("notify_secrets")
    @classmethod
    def _validate_notify_secrets(cls, value: str) -> str:
        parse_notify_secrets(value)
        return value

    @field_validator("cors_origins")
    @classmethod
    def _refuse_wildcard_origin(cls, value: list[str]) -> list[str]:
        # Credentials (bearer tokens) and a `*` origin together would let any site drive the shell.
        if "*" in value:
            raise ValueError("a '*' CORS origin is refused: list the console origins explicitly")
        return value

    @field_validator("cluster_secret")
    @classmethod
    def _long_enough_secret(cls, value: str) -> str:
        if value and len(value) < MIN_SECRET_LENGTH:
            raise ValueError(f"the secret is shorter than {MIN_SECRET_LENGTH} characters")
        return value

    @field_validator("node_url", "public_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/\s]+(/.*)?$", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("oidc_issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        # Kept as written: a token's `iss` must equal it exactly (some issuers end in a slash).
        if value and not re.match(r"^https?://[^/\s]+(/\S*)?$", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _oidc_needs_an_audience(self) -> Settings:
        # Without an audience check, any token the issuer signed for any other service would
        # open this one.
        if self.oidc_issuer and not self.oidc_audience:
            raise ValueError("SHELLGATE_OIDC_ISSUER needs SHELLGATE_OIDC_AUDIENCE")
        return self

    @field_validator("tokens")
    @classmethod
    def _validate_tokens(cls, value: str) -> str:
        parse_tokens(value)
        return value

    @field_validator("shell")
    @classmethod
    def _shell_is_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("shell must be an absolute path")
        return value

    @model_validator(mode="after")
    def _notify_default_is_usable(self) -> Settings:
        from app.core.urls import AllowList, UrlRefused

        # The server's own URLs are checked as a request's `notify_url` is (their hosts again
        # at every delivery): a refused one stops the start rather than every delivery.
        for name, url in (
            ("notify_url", self.notify_url),
            ("approval_notify_url", self.approval_notify_url),
        ):
            if url is None:
                continue
            if not self.notify_secret:
                raise ValueError(f"{name} needs SHELLGATE_NOTIFY_SECRET to sign its deliveries")
            try:
                AllowList(self.notify_allow).admit(url)
            except UrlRefused as error:
                raise ValueError(f"{name}: {error}") from error
        return self

    @model_validator(mode="after")
    def _workspace_exists(self) -> Settings:
        if not self.workspace.is_dir():
            raise ValueError(f"workspace {self.workspace} is not a directory")
        return self

    def token_entries(self) -> list[TokenEntry]:
        return parse_tokens(self.tokens)

    @functools.cached_property
    def artifacts_dir(self) -> Path:
        # Read at every execution's start (a path join each time was 0.7 % of a submit's CPU).
        # Settings are frozen; the one `model_copy` (cluster/identity.py) keeps `data_dir`.
        return self.data_dir / "artifacts"

    @property
    def stop_drain(self) -> float:
        """How long the stop's drain lasts at most: `shutdown_drain`, within a tenth of the
        grace, so that the rest of the stop keeps its share."""
        return min(self.shutdown_drain, self.shutdown_grace / 10)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'shellgate.db').resolve()}"
