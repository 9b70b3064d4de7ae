"""Examples of every request body and 2xx answer in `openapi.json`, keyed by
operation id, then `request` or the status, then the content type (app/api/openapi_examples.py
puts them in the document). Generated from a real server by
`python -m tests.api_examples_capture`: do not edit by hand; tests/test_openapi_examples.py
validates each against its schema."""
# ruff: noqa: E501 (captured text: an answer's line is as long as the server made it)

from __future__ import annotations

from typing import Any

EXAMPLES: dict[str, dict[str, dict[str, Any]]] = {
    "approveApproval": {
        "200": {
            "application/json": {
                "command": "terraform apply -target=module.dns",
                "created_at": "2026-12-07T23:40:45.591945Z",
                "cwd": "/home/agent/project",
                "decided_at": "2026-12-07T23:40:45.603451Z",
                "decided_by": "carol",
                "decision_reason": "DNS only, reviewed",
                "env": {},
                "execution_id": "ex_8dLTD-kQVYOME4ximHft",
                "expires_at": "2026-12-07T23:50:45.591945Z",
                "file_operation_id": None,
                "id": "ap_ZL4TYAJb4KXx8aOmTTDh",
                "kind": "command",
                "pty": False,
                "reason": "Prompt required by bash pattern: terraform apply*",
                "remembered_rule": None,
                "requested_by": "alice",
                "sandbox_request": None,
                "session": None,
                "state": "approved",
                "subject": "execution",
                "suggested_pattern": "terraform apply *",
            }
        },
        "request": {"application/json": {"reason": "DNS only, reviewed"}},
    },
    "cancelOperation": {
        "200": {
            "application/json": {
                "approval_id": "ap_wurvyrk06mlegJIJd0Ws",
                "created_at": "2026-12-07T23:40:45.666411Z",
                "execution_id": None,
                "finished_at": "2026-12-07T23:40:45.776804Z",
                "id": "fo_1A5QqhKwWLfdIEjTJsDR",
                "message": "Approval expired by alice: file operation cancelled by its requester",
                "mode": None,
                "op": "write",
                "owner": "alice",
                "path": "/etc/hostname",
                "reason": "write of /etc/hostname: outside the workspace",
                "resolved_path": "/etc/hostname",
                "sha256": None,
                "size": 9,
                "state": "rejected",
                "verdict": "prompt",
            }
        }
    },
    "check": {
        "200": {
            "application/json": {
                "judged_path": "/home/agent/project/notes/todo.txt",
                "path": "/home/agent/project/notes/todo.txt",
                "reason": "read of /home/agent/project/notes/todo.txt: inside the workspace",
                "resolved_path": "/home/agent/project/notes/todo.txt",
                "rule": None,
                "verdict": "allow",
            }
        }
    },
    "checkHealth": {"200": {"application/json": {"status": "ok"}}},
    "checkReadiness": {"200": {"application/json": {"recovery": "done", "status": "ok"}}},
    "createSession": {
        "201": {
            "application/json": {
                "busy": False,
                "created_at": "2026-12-07T23:40:45.783218Z",
                "cwd": "/home/agent/project",
                "env": {"PROJECT": "demo"},
                "id": "se_l0DqD3OiwOvEJQiPExpT",
                "keep_cwd": True,
                "limits": {},
                "owner": "alice",
                "pty": False,
                "sandbox": None,
                "timeout_ms": 600000,
                "tool": {
                    "description": "Run a bash command in "
                    "this session and "
                    "stream its output as "
                    "NDJSON items {stdout, "
                    "stderr, exit_code, "
                    "signal, truncated}: "
                    "stdout and stderr "
                    "arrive apart; output "
                    "comes in chunks of at "
                    "most 4096 bytes, and "
                    "the last item carries "
                    "the exit status "
                    "(signal -1 means the "
                    "command timed out). "
                    "Exported variables, "
                    "functions and aliases "
                    "persist from one call "
                    "to the next; the "
                    "working directory is "
                    "reset to the "
                    "session's cwd on "
                    "every call. The "
                    "complete output stays "
                    "readable in parts as "
                    "artifact://<id> "
                    "through `GET "
                    "/v1/executions/{id}/output?offset=&limit=` "
                    "(the id is in the "
                    "X-Execution-Id "
                    "header). Environment "
                    "variables and PTY "
                    "mode are session "
                    "configuration, not "
                    "call arguments. The "
                    "default timeout is "
                    "600000 milliseconds "
                    "(10 minutes). To "
                    "extend it for one "
                    "call, pass "
                    "`timeout_ms` with an "
                    "integer strictly "
                    "greater than 600000; "
                    "values at or below "
                    "the default are "
                    "rejected: the "
                    "argument can only "
                    "raise the timeout, "
                    "never lower it. The "
                    "command must not "
                    "start with an "
                    "absolute path and "
                    "must not match a "
                    "dangerous pattern; "
                    "the server's policy "
                    "may deny it or wait "
                    "for a human approval.",
                    "inputSchema": {
                        "additionalProperties": False,
                        "properties": {
                            "command": {
                                "description": "The "
                                "bash "
                                "command. "
                                "Not "
                                "an "
                                "absolute "
                                "path "
                                "(no "
                                "leading "
                                "`/`), "
                                "and "
                                "not "
                                "matching "
                                "a "
                                "dangerous "
                                "security "
                                "pattern.",
                                "type": "string",
                            },
                            "timeout_ms": {
                                "description": "Optional: "
                                "a "
                                "longer "
                                "timeout "
                                "for "
                                "this "
                                "call "
                                "only, "
                                "in "
                                "milliseconds; "
                                "must "
                                "be "
                                "strictly "
                                "greater "
                                "than "
                                "600000.",
                                "type": "integer",
                            },
                        },
                        "required": ["command"],
                        "type": "object",
                    },
                    "name": "bash_run",
                },
                "updated_at": "2026-12-07T23:40:45.783218Z",
            }
        },
        "202": {
            "application/json": {
                "approval": {
                    "expires_at": "2026-12-07T23:50:45.797828Z",
                    "id": "ap_K0ptjAXaxI6WM4jQEtIP",
                    "reason": "Sandbox escalation requested for a new session: network on",
                    "state": "pending",
                },
                "state": "awaiting_approval",
            }
        },
        "request": {"application/json": {"env": {"PROJECT": "demo"}, "keep_cwd": True}},
    },
    "createWsTicket": {
        "201": {
            "application/json": {
                "expires_at": "2026-12-07T23:42:15.868120Z",
                "ticket": "wst_9GzdPQrLm2PWHme7ariRAsciSwY312l9",
            }
        }
    },
    "denyApproval": {
        "200": {
            "application/json": {
                "command": "terraform apply -auto-approve",
                "created_at": "2026-12-07T23:40:45.553237Z",
                "cwd": "/home/agent/project",
                "decided_at": "2026-12-07T23:40:45.581581Z",
                "decided_by": "carol",
                "decision_reason": "not in this change window",
                "env": {},
                "execution_id": "ex_GwtdVV1IQCMJ4GDBld6p",
                "expires_at": "2026-12-07T23:50:45.553237Z",
                "file_operation_id": None,
                "id": "ap_zi8VXr6kLFgzCcZBsun_",
                "kind": "command",
                "pty": False,
                "reason": "Prompt required by bash pattern: terraform apply*",
                "remembered_rule": None,
                "requested_by": "alice",
                "sandbox_request": None,
                "session": None,
                "state": "denied",
                "subject": "execution",
                "suggested_pattern": "terraform apply *",
            }
        },
        "request": {"application/json": {"reason": "not in this change window"}},
    },
    "download": {
        "200": {"application/octet-stream": "buy milk\n"},
        "202": {
            "application/json": {
                "approval_id": "ap_PmCRgIwajARgUhnfizZM",
                "created_at": "2026-12-07T23:40:45.713489Z",
                "execution_id": None,
                "finished_at": None,
                "id": "fo_eWafPgj4a7ur5-_FGF-_",
                "message": None,
                "mode": None,
                "op": "read",
                "owner": "alice",
                "path": "/etc/hostname",
                "reason": "read of /etc/hostname: outside the workspace",
                "resolved_path": "/etc/hostname",
                "sha256": None,
                "size": None,
                "state": "awaiting_approval",
                "verdict": "prompt",
            }
        },
        "206": {"application/octet-stream": "milk\n"},
    },
    "evaluatePolicy": {
        "200": {
            "application/json": {
                "cd_rewrite": None,
                "command_verdict": "prompt",
                "critical_hits": [],
                "cwd": "/home/agent/project",
                "env": [],
                "env_verdict": "allow",
                "interception": None,
                "matched_rule": {"approval": "prompt", "match": "terraform apply*"},
                "matched_segment": "terraform apply -auto-approve",
                "parse_error": None,
                "reason": "Prompt required by bash pattern: terraform apply*",
                "sandbox": {
                    "hidden": [
                        "/var/lib/shellgate",
                        "/var/lib/shellgate/admin.token",
                        "/srv/shellgate/.env",
                        "/root/.ssh",
                        "/root/.aws",
                        "/root/.azure",
                        "/root/.config/gcloud",
                        "/root/.kube",
                        "/root/.gnupg",
                        "/root/.netrc",
                        "/root/.docker/config.json",
                        "/root/.git-credentials",
                        "/root/.pgpass",
                        "/root/.npmrc",
                        "/root/.pypirc",
                        "/root/.config/gh",
                        "/root/.cargo/credentials.toml",
                        "/root/.terraform.d/credentials.tfrc.json",
                        "/root/.vault-token",
                        "/root/.gem/credentials",
                        "/root/.config/rclone",
                        "/root/.password-store",
                        "/root/.config/op",
                        "/root/.local/share/keyrings",
                        "/root/.config/glab-cli",
                        "/root/.config/hub",
                        "/root/.config/containers/auth.json",
                        "/root/.dockercfg",
                        "/root/.config/doctl",
                        "/root/.config/hcloud",
                        "/root/.fly",
                        "/root/.oci",
                        "/root/.s3cfg",
                        "/root/.boto",
                        "/root/.databrickscfg",
                        "/root/.kaggle",
                        "/root/.m2/settings.xml",
                        "/root/.m2/settings-security.xml",
                        "/root/.gradle/gradle.properties",
                        "/root/.yarnrc.yml",
                        "/root/.composer/auth.json",
                        "/root/.config/composer/auth.json",
                        "/root/.cache/huggingface/token",
                        "/root/.huggingface/token",
                        "/root/.codex",
                        "/root/.claude/.credentials.json",
                        "/root/.claude.json",
                        "/root/.gemini",
                        "/root/.config/github-copilot",
                        "/root/.mozilla",
                        "/root/.config/google-chrome",
                        "/root/.config/chromium",
                        "/root/.config/BraveSoftware",
                        "/root/.bash_history",
                        "/root/.zsh_history",
                        "/root/.local/share/fish/fish_history",
                        "/root/.python_history",
                        "/root/.node_repl_history",
                        "/root/.psql_history",
                        "/root/.mysql_history",
                        "/root/.sqlite_history",
                        "/root/.rediscli_history",
                        "/etc/shadow",
                        "/etc/gshadow",
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
                    ],
                    "network": "off",
                    "write": ["/home/agent/project"],
                },
                "segments": ["terraform apply -auto-approve"],
                "unreadable_reasons": [],
                "verdict": "prompt",
            }
        }
    },
    "followExecutionEvents": {
        "200": {
            "text/event-stream": "retry: 3000\n"
            "\n"
            "id: 3\n"
            "event: end\n"
            "data: "
            '{"id":"ex_Sx4IT_u2QKYtVvBSFqrf","state":"completed","mode":"foreground","owner":"alice","command":"echo '
            'hello","cwd":"/home/agent/project","pty":false,"session":null,"node":"node-a","exit_code":0,"signal":null,"timed_out":false,"output":"hello\\n","truncated":false,"total_bytes":6,"total_lines":2,"output_bytes":6,"output_lines":2,"elided_bytes":0,"artifact":"artifact://ex_Sx4IT_u2QKYtVvBSFqrf","wall_time_ms":11.135752999962278,"timeout_seconds":300.0,"requested_timeout_seconds":null,"timeout_disabled":null,"notices":[],"limits":{"memory_mb":12052,"processes":512,"cpu_seconds":null,"file_size_mb":null,"open_files":65536},"confinement":"cgroup1","sandbox":null,"is_error":false,"text":"hello\\n\\nWall '
            "time: 0.01 "
            'seconds","approval":null,"reason":"No '
            "rule matched; default "
            'allow","remembered_rule":null,"notify_url":null,"notify_state":null,"notifications":[],"created_at":"2026-12-07T23:40:45.406269Z","started_at":"2026-12-07T23:40:45.406269Z","finished_at":"2026-12-07T23:40:45.411612Z"}\n'
            "\n"
        }
    },
    "getApproval": {
        "200": {
            "application/json": {
                "command": "terraform apply -auto-approve",
                "created_at": "2026-12-07T23:40:45.553237Z",
                "cwd": "/home/agent/project",
                "decided_at": None,
                "decided_by": None,
                "decision_reason": None,
                "env": {},
                "execution_id": "ex_GwtdVV1IQCMJ4GDBld6p",
                "expires_at": "2026-12-07T23:50:45.553237Z",
                "file_operation_id": None,
                "id": "ap_zi8VXr6kLFgzCcZBsun_",
                "kind": "command",
                "pty": False,
                "reason": "Prompt required by bash pattern: terraform apply*",
                "remembered_rule": None,
                "requested_by": "alice",
                "sandbox_request": None,
                "session": None,
                "state": "pending",
                "subject": "execution",
                "suggested_pattern": "terraform apply *",
            }
        }
    },
    "getExecutionTool": {
        "200": {
            "application/json": {
                "description": "Run a bash command (`bash "
                "-c`) and return its merged "
                "stdout and stderr. The "
                "default timeout is 300 "
                "seconds (0 disables it; "
                "values are clamped to "
                "1-3600). A call still "
                "running after 30 s becomes "
                "a background job: the "
                "answer is 202 with the "
                "output so far, and `GET "
                "/v1/executions/{id}?wait=N` "
                "returns the result. Output "
                "over the inline window (20 "
                "KiB head + 50 KiB tail) is "
                "elided in the middle; the "
                "full log stays readable as "
                "artifact://<id> through "
                "`GET "
                "/v1/executions/{id}/output?offset=&limit=`. "
                "At most 32 background jobs "
                "run at once. Commands pass "
                "the server's policy: some "
                "are denied, some wait for a "
                "human approval. Each "
                "command runs in a sandbox: "
                "it writes only inside its "
                "profile (the workspace, a "
                "private /tmp) and reaches "
                "the network the policy "
                "allows; when a command "
                "needs more, pass `sandbox: "
                "{write, network, "
                "justification}` and a human "
                "decides.",
                "inputSchema": {
                    "$defs": {
                        "ExecutionLimits": {
                            "additionalProperties": False,
                            "description": "Per-execution "
                            "resource "
                            "limits; "
                            "each "
                            "may "
                            "only "
                            "lower "
                            "the "
                            "server's "
                            "(`GET "
                            "/v1/info`).",
                            "properties": {
                                "cpu_seconds": {
                                    "anyOf": [
                                        {"maximum": 1099511627776, "minimum": 1, "type": "integer"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": "CPU time, seconds.",
                                    "title": "Cpu Seconds",
                                },
                                "file_size_mb": {
                                    "anyOf": [
                                        {"maximum": 1099511627776, "minimum": 1, "type": "integer"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": "Largest file written, MB.",
                                    "title": "File Size Mb",
                                },
                                "memory_mb": {
                                    "anyOf": [
                                        {"maximum": 1099511627776, "minimum": 1, "type": "integer"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": "Memory of the whole tree, MB.",
                                    "title": "Memory Mb",
                                },
                                "open_files": {
                                    "anyOf": [
                                        {"maximum": 1073741824, "minimum": 1, "type": "integer"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": "Open files per process.",
                                    "title": "Open Files",
                                },
                                "processes": {
                                    "anyOf": [
                                        {"maximum": 4194304, "minimum": 1, "type": "integer"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": "Processes "
                                    "(and "
                                    "threads) "
                                    "alive "
                                    "at "
                                    "once "
                                    "in "
                                    "the "
                                    "tree.",
                                    "title": "Processes",
                                },
                            },
                            "title": "ExecutionLimits",
                            "type": "object",
                        },
                        "SandboxRequest": {
                            "additionalProperties": False,
                            "description": "More "
                            "than "
                            "the "
                            "policy's "
                            "profile "
                            "for "
                            "this "
                            "one "
                            "call; "
                            "beyond "
                            "it, "
                            "a "
                            "human "
                            "decides.",
                            "examples": [
                                {
                                    "justification": "the build writes its report there",
                                    "write": ["/srv/out"],
                                },
                                {"justification": "pip install", "network": ["pypi.org:443"]},
                            ],
                            "properties": {
                                "justification": {
                                    "anyOf": [
                                        {"maxLength": 4096, "type": "string"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": "Why, "
                                    "in "
                                    "the "
                                    "caller's "
                                    "words: "
                                    "shown "
                                    "to "
                                    "the "
                                    "approver.",
                                    "title": "Justification",
                                },
                                "network": {
                                    "anyOf": [
                                        {"enum": ["on", "off"], "type": "string"},
                                        {"items": {"type": "string"}, "type": "array"},
                                        {"type": "null"},
                                    ],
                                    "default": None,
                                    "description": '"on", '
                                    '"off" '
                                    "or "
                                    "a "
                                    "list "
                                    "of "
                                    "host[:port] "
                                    "globs; "
                                    "null: "
                                    "the "
                                    "profile's.",
                                    "title": "Network",
                                },
                                "write": {
                                    "description": "Paths "
                                    "to "
                                    "make "
                                    "writable "
                                    "(absolute, "
                                    "or "
                                    "starting "
                                    "with "
                                    "$WORKSPACE "
                                    "or "
                                    "~).",
                                    "items": {"type": "string"},
                                    "maxItems": 64,
                                    "title": "Write",
                                    "type": "array",
                                },
                            },
                            "title": "SandboxRequest",
                            "type": "object",
                        },
                    },
                    "additionalProperties": False,
                    "examples": [
                        {"command": "echo hello; uname -s"},
                        {"async": True, "command": "echo building && echo done", "timeout": 600},
                        {"command": "echo $GREETING", "cwd": "~", "env": {"GREETING": "hi"}},
                    ],
                    "properties": {
                        "approval_wait": {
                            "default": 30,
                            "description": "Seconds "
                            "a "
                            "foreground "
                            "call "
                            "waits "
                            "for "
                            "an "
                            "approval "
                            "before "
                            "answering "
                            "202.",
                            "maximum": 3600,
                            "minimum": 0,
                            "title": "Approval Wait",
                            "type": "number",
                        },
                        "async": {
                            "default": False,
                            "description": "Start as a background job.",
                            "title": "Async",
                            "type": "boolean",
                        },
                        "cols": {
                            "default": 120,
                            "description": "PTY columns, clamped to 20..400.",
                            "title": "Cols",
                            "type": "integer",
                        },
                        "command": {
                            "description": "Shell text, run as `bash -c <command>`.",
                            "title": "Command",
                            "type": "string",
                        },
                        "cwd": {
                            "anyOf": [{"type": "string"}, {"type": "null"}],
                            "default": None,
                            "description": "Working directory (`~` expands).",
                            "title": "Cwd",
                        },
                        "env": {
                            "anyOf": [
                                {"additionalProperties": {"type": "string"}, "type": "object"},
                                {"type": "null"},
                            ],
                            "default": None,
                            "description": "Extra "
                            "environment "
                            "values "
                            "(never "
                            "parsed "
                            "as "
                            "shell "
                            "text); "
                            "every "
                            "name "
                            "is "
                            "judged "
                            "by "
                            "the "
                            "policy's "
                            "env "
                            "rules "
                            "(BASH_ENV, "
                            "PATH, "
                            "LD_* "
                            "and "
                            "the "
                            "like "
                            "are "
                            "denied).",
                            "title": "Env",
                        },
                        "idle_action": {
                            "default": "background",
                            "description": "What `idle_timeout` does.",
                            "enum": ["background", "cancel"],
                            "title": "Idle Action",
                            "type": "string",
                        },
                        "idle_timeout": {
                            "anyOf": [
                                {"exclusiveMinimum": 0, "maximum": 3600, "type": "number"},
                                {"type": "null"},
                            ],
                            "default": None,
                            "description": "Seconds "
                            "without "
                            "any "
                            "output "
                            "after "
                            "which "
                            "the "
                            "call "
                            "answers "
                            "(the "
                            "command "
                            "goes "
                            "on "
                            "as "
                            "a "
                            "job) "
                            "or, "
                            "with "
                            "`idle_action: "
                            "cancel`, "
                            "the "
                            "command "
                            "is "
                            "cancelled.",
                            "title": "Idle Timeout",
                        },
                        "limits": {
                            "anyOf": [{"$ref": "#/$defs/ExecutionLimits"}, {"type": "null"}],
                            "default": None,
                            "description": "Resource "
                            "limits "
                            "of "
                            "this "
                            "run "
                            "(only "
                            "lower "
                            "than "
                            "the "
                            "server's).",
                        },
                        "notify_url": {
                            "anyOf": [{"maxLength": 2048, "type": "string"}, {"type": "null"}],
                            "default": None,
                            "description": "POST "
                            "the "
                            "terminal "
                            "record "
                            "here, "
                            "signed "
                            "(`X-Shellgate-Signature`); "
                            "must "
                            "match "
                            "SHELLGATE_NOTIFY_ALLOW. "
                            "Default: "
                            "SHELLGATE_NOTIFY_URL.",
                            "title": "Notify Url",
                        },
                        "pty": {"default": False, "title": "Pty", "type": "boolean"},
                        "rows": {
                            "default": 40,
                            "description": "PTY rows, clamped to 5..200.",
                            "title": "Rows",
                            "type": "integer",
                        },
                        "sandbox": {
                            "anyOf": [{"$ref": "#/$defs/SandboxRequest"}, {"type": "null"}],
                            "default": None,
                            "description": "More "
                            "than "
                            "the "
                            "policy's "
                            "sandbox "
                            "profile "
                            "for "
                            "this "
                            "run: "
                            "beyond "
                            "it, "
                            "an "
                            "approval "
                            "of "
                            "kind "
                            "`sandbox` "
                            "(or "
                            "403 "
                            "under "
                            "`escalation: "
                            "deny`); "
                            "in "
                            "a "
                            "session, "
                            "more "
                            "than "
                            "the "
                            "session's "
                            "profile "
                            "is "
                            "a "
                            "409.",
                        },
                        "session": {
                            "anyOf": [{"maxLength": 64, "type": "string"}, {"type": "null"}],
                            "default": None,
                            "title": "Session",
                        },
                        "timeout": {
                            "default": 300,
                            "description": "Seconds; "
                            "0 "
                            "disables "
                            "the "
                            "deadline; "
                            "otherwise "
                            "clamped "
                            "to "
                            "1..3600.",
                            "title": "Timeout",
                            "type": "number",
                        },
                        "tools": {
                            "anyOf": [
                                {"items": {"type": "string"}, "maxItems": 64, "type": "array"},
                                {"type": "null"},
                            ],
                            "default": None,
                            "title": "Tools",
                        },
                    },
                    "required": ["command"],
                    "type": "object",
                },
                "name": "bash",
            }
        }
    },
    "getInfo": {
        "200": {
            "application/json": {
                "caller": {"name": "alice", "role": "agent"},
                "cluster_running_jobs": None,
                "confinement": "cgroup1",
                "environment": {
                    "exclude": [
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
                        "*_PAT",
                        "*_PAT_*",
                        "*WEBHOOK*",
                        "*COOKIE*",
                        "GPG_AGENT_INFO",
                    ],
                    "inherit": "all",
                    "pass": [],
                },
                "execution_limits": {
                    "cpu_seconds": None,
                    "file_size_mb": None,
                    "memory_mb": 12052,
                    "open_files": 65536,
                    "processes": 512,
                },
                "limits": {
                    "approval_timeout_seconds": 600.0,
                    "artifact_max_bytes": 268435456,
                    "auto_background_ms": 30000,
                    "default_timeout_seconds": 300,
                    "inline_head_bytes": 20480,
                    "inline_tail_bytes": 51200,
                    "kill_grace_seconds": 2.0,
                    "max_command_bytes": 65536,
                    "max_line_bytes": 768,
                    "max_pending_approvals": 50,
                    "max_timeout_seconds": 3600,
                    "retention_days": 7.0,
                    "timeout_range_seconds": [1, 3600],
                    "ws_ping_seconds": 20.0,
                },
                "max_jobs": 32,
                "node": "node-a",
                "oidc_issuer": None,
                "running_jobs": 0,
                "sandbox": {"enforced": False, "landlock_abi": 7, "mechanisms": []},
                "total_limits": {"memory_mb": 21092, "processes": 28672},
                "version": "0.1.0",
            }
        }
    },
    "getMetrics": {
        "200": {
            "text/plain": "# HELP process_virtual_memory_bytes Virtual memory size "
            "in bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\n"
            "process_virtual_memory_bytes 5.95222528e+08\n"
            "# HELP process_resident_memory_bytes Resident memory "
            "size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes 1.1026432e+08\n"
        }
    },
    "getPolicy": {
        "200": {
            "application/json": {
                "critical": "prompt",
                "default": "allow",
                "env": {
                    "deny": [
                        "BASH_ENV",
                        "ENV",
                        "BASH_FUNC_*",
                        "SHELLOPTS",
                        "BASHOPTS",
                        "PS0",
                        "PS1",
                        "PS2",
                        "PS4",
                        "PROMPT_COMMAND",
                        "IFS",
                        "PATH",
                        "LD_*",
                        "GCONV_PATH",
                        "PYTHONSTARTUP",
                        "PERL5OPT",
                        "NODE_OPTIONS",
                        "RUBYOPT",
                        "GIT_SSH_COMMAND",
                        "GIT_SSH",
                        "GIT_EXTERNAL_DIFF",
                        "GIT_EDITOR",
                        "GIT_SEQUENCE_EDITOR",
                        "GIT_PAGER",
                        "GIT_ASKPASS",
                        "GIT_PROXY_COMMAND",
                        "GIT_CONFIG_PARAMETERS",
                        "GIT_CONFIG_COUNT",
                        "GIT_CONFIG_KEY_*",
                        "GIT_CONFIG_VALUE_*",
                        "GIT_CONFIG_GLOBAL",
                        "GIT_CONFIG_SYSTEM",
                        "GIT_EXEC_PATH",
                        "GIT_TEMPLATE_DIR",
                        "RSYNC_RSH",
                        "RSYNC_CONNECT_PROG",
                        "LESSOPEN",
                        "LESSCLOSE",
                        "LESSEDIT",
                        "PAGER",
                        "MANPAGER",
                        "SYSTEMD_PAGER",
                        "EDITOR",
                        "VISUAL",
                        "FCEDIT",
                        "SSH_ASKPASS",
                        "SUDO_ASKPASS",
                        "BROWSER",
                        "TAR_OPTIONS",
                        "ZIPOPT",
                        "MANOPT",
                        "PARALLEL",
                    ],
                    "prompt": [],
                },
                "files": {"outside": "prompt", "rules": [], "workspace": "allow"},
                "interceptor": {"enabled": False, "rules": None},
                "keep_daemons": False,
                "remembered": [],
                "rules": [
                    {"approval": "prompt", "match": "terraform apply*"},
                    {"approval": "deny", "match": "rm -rf /*"},
                ],
                "sandbox": {"escalation": "prompt", "hidden": [], "network": None, "write": []},
                "unreadable": "prompt",
            }
        }
    },
    "getSession": {
        "200": {
            "application/json": {
                "busy": False,
                "created_at": "2026-12-07T23:40:45.783218Z",
                "cwd": "/home/agent/project",
                "env": {"PROJECT": "demo"},
                "id": "se_l0DqD3OiwOvEJQiPExpT",
                "keep_cwd": True,
                "limits": {},
                "owner": "alice",
                "pty": False,
                "sandbox": None,
                "timeout_ms": 600000,
                "tool": {
                    "description": "Run a bash command in "
                    "this session and stream "
                    "its output as NDJSON "
                    "items {stdout, stderr, "
                    "exit_code, signal, "
                    "truncated}: stdout and "
                    "stderr arrive apart; "
                    "output comes in chunks "
                    "of at most 4096 bytes, "
                    "and the last item "
                    "carries the exit status "
                    "(signal -1 means the "
                    "command timed out). "
                    "Exported variables, "
                    "functions and aliases "
                    "persist from one call to "
                    "the next; the working "
                    "directory is reset to "
                    "the session's cwd on "
                    "every call. The complete "
                    "output stays readable in "
                    "parts as artifact://<id> "
                    "through `GET "
                    "/v1/executions/{id}/output?offset=&limit=` "
                    "(the id is in the "
                    "X-Execution-Id header). "
                    "Environment variables "
                    "and PTY mode are session "
                    "configuration, not call "
                    "arguments. The default "
                    "timeout is 600000 "
                    "milliseconds (10 "
                    "minutes). To extend it "
                    "for one call, pass "
                    "`timeout_ms` with an "
                    "integer strictly greater "
                    "than 600000; values at "
                    "or below the default are "
                    "rejected: the argument "
                    "can only raise the "
                    "timeout, never lower it. "
                    "The command must not "
                    "start with an absolute "
                    "path and must not match "
                    "a dangerous pattern; the "
                    "server's policy may deny "
                    "it or wait for a human "
                    "approval.",
                    "inputSchema": {
                        "additionalProperties": False,
                        "properties": {
                            "command": {
                                "description": "The "
                                "bash "
                                "command. "
                                "Not "
                                "an "
                                "absolute "
                                "path "
                                "(no "
                                "leading "
                                "`/`), "
                                "and "
                                "not "
                                "matching "
                                "a "
                                "dangerous "
                                "security "
                                "pattern.",
                                "type": "string",
                            },
                            "timeout_ms": {
                                "description": "Optional: "
                                "a "
                                "longer "
                                "timeout "
                                "for "
                                "this "
                                "call "
                                "only, "
                                "in "
                                "milliseconds; "
                                "must "
                                "be "
                                "strictly "
                                "greater "
                                "than "
                                "600000.",
                                "type": "integer",
                            },
                        },
                        "required": ["command"],
                        "type": "object",
                    },
                    "name": "bash_run",
                },
                "updated_at": "2026-12-07T23:40:45.783218Z",
            }
        }
    },
    "getSessionTool": {
        "200": {
            "application/json": {
                "description": "Run a bash command in this "
                "session and stream its output "
                "as NDJSON items {stdout, "
                "stderr, exit_code, signal, "
                "truncated}: stdout and stderr "
                "arrive apart; output comes in "
                "chunks of at most 4096 bytes, "
                "and the last item carries the "
                "exit status (signal -1 means "
                "the command timed out). "
                "Exported variables, functions "
                "and aliases persist from one "
                "call to the next; the working "
                "directory is reset to the "
                "session's cwd on every call. "
                "The complete output stays "
                "readable in parts as "
                "artifact://<id> through `GET "
                "/v1/executions/{id}/output?offset=&limit=` "
                "(the id is in the "
                "X-Execution-Id header). "
                "Environment variables and PTY "
                "mode are session "
                "configuration, not call "
                "arguments. The default "
                "timeout is 600000 "
                "milliseconds (10 minutes). To "
                "extend it for one call, pass "
                "`timeout_ms` with an integer "
                "strictly greater than 600000; "
                "values at or below the "
                "default are rejected: the "
                "argument can only raise the "
                "timeout, never lower it. The "
                "command must not start with "
                "an absolute path and must not "
                "match a dangerous pattern; "
                "the server's policy may deny "
                "it or wait for a human "
                "approval.",
                "inputSchema": {
                    "additionalProperties": False,
                    "properties": {
                        "command": {
                            "description": "The "
                            "bash "
                            "command. "
                            "Not "
                            "an "
                            "absolute "
                            "path "
                            "(no "
                            "leading "
                            "`/`), "
                            "and "
                            "not "
                            "matching "
                            "a "
                            "dangerous "
                            "security "
                            "pattern.",
                            "type": "string",
                        },
                        "timeout_ms": {
                            "description": "Optional: "
                            "a "
                            "longer "
                            "timeout "
                            "for "
                            "this "
                            "call "
                            "only, "
                            "in "
                            "milliseconds; "
                            "must "
                            "be "
                            "strictly "
                            "greater "
                            "than "
                            "600000.",
                            "type": "integer",
                        },
                    },
                    "required": ["command"],
                    "type": "object",
                },
                "name": "bash_run",
            }
        }
    },
    "listApprovals": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "command": "terraform apply -auto-approve",
                        "created_at": "2026-12-07T23:40:45.553237Z",
                        "cwd": "/home/agent/project",
                        "decided_at": None,
                        "decided_by": None,
                        "decision_reason": None,
                        "env": {},
                        "execution_id": "ex_GwtdVV1IQCMJ4GDBld6p",
                        "expires_at": "2026-12-07T23:50:45.553237Z",
                        "file_operation_id": None,
                        "id": "ap_zi8VXr6kLFgzCcZBsun_",
                        "kind": "command",
                        "pty": False,
                        "reason": "Prompt required by bash pattern: terraform apply*",
                        "remembered_rule": None,
                        "requested_by": "alice",
                        "sandbox_request": None,
                        "session": None,
                        "state": "pending",
                        "subject": "execution",
                        "suggested_pattern": "terraform apply *",
                    }
                ]
            }
        }
    },
    "listExecutions": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "approval": None,
                        "artifact": "artifact://ex_Sx4IT_u2QKYtVvBSFqrf",
                        "command": "echo hello",
                        "confinement": "cgroup1",
                        "created_at": "2026-12-07T23:40:45.406269Z",
                        "cwd": "/home/agent/project",
                        "elided_bytes": 0,
                        "exit_code": 0,
                        "finished_at": "2026-12-07T23:40:45.411612Z",
                        "id": "ex_Sx4IT_u2QKYtVvBSFqrf",
                        "is_error": False,
                        "limits": {
                            "cpu_seconds": None,
                            "file_size_mb": None,
                            "memory_mb": 12052,
                            "open_files": 65536,
                            "processes": 512,
                        },
                        "mode": "foreground",
                        "node": "node-a",
                        "notices": [],
                        "notifications": [],
                        "notify_state": None,
                        "notify_url": None,
                        "output": "hello\n",
                        "output_bytes": 6,
                        "output_lines": 2,
                        "owner": "alice",
                        "pty": False,
                        "reason": "No rule matched; default allow",
                        "remembered_rule": None,
                        "requested_timeout_seconds": None,
                        "sandbox": None,
                        "session": None,
                        "signal": None,
                        "started_at": "2026-12-07T23:40:45.406269Z",
                        "state": "completed",
                        "text": "hello\n\nWall time: 0.01 seconds",
                        "timed_out": False,
                        "timeout_disabled": None,
                        "timeout_seconds": 300.0,
                        "total_bytes": 6,
                        "total_lines": 2,
                        "truncated": False,
                        "wall_time_ms": 11.135752999962278,
                    }
                ],
                "next_cursor": None,
            }
        }
    },
    "listOperations": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "approval_id": "ap_tBX2W-6LIfSJG4YEYtcn",
                        "created_at": "2026-12-07T23:40:45.733492Z",
                        "execution_id": None,
                        "finished_at": None,
                        "id": "fo_1zk69NQifug-Y2YxwecS",
                        "message": None,
                        "mode": None,
                        "op": "stat",
                        "owner": "alice",
                        "path": "/etc/hostname",
                        "reason": "read of /etc/hostname: outside the workspace",
                        "resolved_path": "/etc/hostname",
                        "sha256": None,
                        "size": None,
                        "state": "awaiting_approval",
                        "verdict": "prompt",
                    }
                ]
            }
        }
    },
    "listPolicyVersions": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "author": "root",
                        "created_at": "2026-12-07T23:40:45.379271Z",
                        "document": {
                            "critical": "prompt",
                            "default": "allow",
                            "env": {
                                "deny": [
                                    "BASH_ENV",
                                    "ENV",
                                    "BASH_FUNC_*",
                                    "SHELLOPTS",
                                    "BASHOPTS",
                                    "PS0",
                                    "PS1",
                                    "PS2",
                                    "PS4",
                                    "PROMPT_COMMAND",
                                    "IFS",
                                    "PATH",
                                    "LD_*",
                                    "GCONV_PATH",
                                    "PYTHONSTARTUP",
                                    "PERL5OPT",
                                    "NODE_OPTIONS",
                                    "RUBYOPT",
                                    "GIT_SSH_COMMAND",
                                    "GIT_SSH",
                                    "GIT_EXTERNAL_DIFF",
                                    "GIT_EDITOR",
                                    "GIT_SEQUENCE_EDITOR",
                                    "GIT_PAGER",
                                    "GIT_ASKPASS",
                                    "GIT_PROXY_COMMAND",
                                    "GIT_CONFIG_PARAMETERS",
                                    "GIT_CONFIG_COUNT",
                                    "GIT_CONFIG_KEY_*",
                                    "GIT_CONFIG_VALUE_*",
                                    "GIT_CONFIG_GLOBAL",
                                    "GIT_CONFIG_SYSTEM",
                                    "GIT_EXEC_PATH",
                                    "GIT_TEMPLATE_DIR",
                                    "RSYNC_RSH",
                                    "RSYNC_CONNECT_PROG",
                                    "LESSOPEN",
                                    "LESSCLOSE",
                                    "LESSEDIT",
                                    "PAGER",
                                    "MANPAGER",
                                    "SYSTEMD_PAGER",
                                    "EDITOR",
                                    "VISUAL",
                                    "FCEDIT",
                                    "SSH_ASKPASS",
                                    "SUDO_ASKPASS",
                                    "BROWSER",
                                    "TAR_OPTIONS",
                                    "ZIPOPT",
                                    "MANOPT",
                                    "PARALLEL",
                                ],
                                "prompt": [],
                            },
                            "files": {"outside": "prompt", "rules": [], "workspace": "allow"},
                            "interceptor": {"enabled": False, "rules": None},
                            "keep_daemons": False,
                            "remembered": [],
                            "rules": [
                                {"approval": "prompt", "match": "terraform apply*"},
                                {"approval": "deny", "match": "rm -rf /*"},
                            ],
                            "sandbox": {
                                "escalation": "prompt",
                                "hidden": [],
                                "network": None,
                                "write": [],
                            },
                            "unreadable": "prompt",
                        },
                        "id": 1,
                    }
                ]
            }
        }
    },
    "listSessions": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "busy": False,
                        "created_at": "2026-12-07T23:40:45.783218Z",
                        "cwd": "/home/agent/project",
                        "env": {"PROJECT": "demo"},
                        "id": "se_l0DqD3OiwOvEJQiPExpT",
                        "keep_cwd": True,
                        "limits": {},
                        "owner": "alice",
                        "pty": False,
                        "sandbox": None,
                        "timeout_ms": 600000,
                        "tool": {
                            "description": "Run a bash "
                            "command in "
                            "this session "
                            "and stream "
                            "its output "
                            "as NDJSON "
                            "items "
                            "{stdout, "
                            "stderr, "
                            "exit_code, "
                            "signal, "
                            "truncated}: "
                            "stdout and "
                            "stderr "
                            "arrive "
                            "apart; "
                            "output comes "
                            "in chunks of "
                            "at most 4096 "
                            "bytes, and "
                            "the last "
                            "item carries "
                            "the exit "
                            "status "
                            "(signal -1 "
                            "means the "
                            "command "
                            "timed out). "
                            "Exported "
                            "variables, "
                            "functions "
                            "and aliases "
                            "persist from "
                            "one call to "
                            "the next; "
                            "the working "
                            "directory is "
                            "reset to the "
                            "session's "
                            "cwd on every "
                            "call. The "
                            "complete "
                            "output stays "
                            "readable in "
                            "parts as "
                            "artifact://<id> "
                            "through `GET "
                            "/v1/executions/{id}/output?offset=&limit=` "
                            "(the id is "
                            "in the "
                            "X-Execution-Id "
                            "header). "
                            "Environment "
                            "variables "
                            "and PTY mode "
                            "are session "
                            "configuration, "
                            "not call "
                            "arguments. "
                            "The default "
                            "timeout is "
                            "600000 "
                            "milliseconds "
                            "(10 "
                            "minutes). To "
                            "extend it "
                            "for one "
                            "call, pass "
                            "`timeout_ms` "
                            "with an "
                            "integer "
                            "strictly "
                            "greater than "
                            "600000; "
                            "values at or "
                            "below the "
                            "default are "
                            "rejected: "
                            "the argument "
                            "can only "
                            "raise the "
                            "timeout, "
                            "never lower "
                            "it. The "
                            "command must "
                            "not start "
                            "with an "
                            "absolute "
                            "path and "
                            "must not "
                            "match a "
                            "dangerous "
                            "pattern; the "
                            "server's "
                            "policy may "
                            "deny it or "
                            "wait for a "
                            "human "
                            "approval.",
                            "inputSchema": {
                                "additionalProperties": False,
                                "properties": {
                                    "command": {
                                        "description": "The "
                                        "bash "
                                        "command. "
                                        "Not "
                                        "an "
                                        "absolute "
                                        "path "
                                        "(no "
                                        "leading "
                                        "`/`), "
                                        "and "
                                        "not "
                                        "matching "
                                        "a "
                                        "dangerous "
                                        "security "
                                        "pattern.",
                                        "type": "string",
                                    },
                                    "timeout_ms": {
                                        "description": "Optional: "
                                        "a "
                                        "longer "
                                        "timeout "
                                        "for "
                                        "this "
                                        "call "
                                        "only, "
                                        "in "
                                        "milliseconds; "
                                        "must "
                                        "be "
                                        "strictly "
                                        "greater "
                                        "than "
                                        "600000.",
                                        "type": "integer",
                                    },
                                },
                                "required": ["command"],
                                "type": "object",
                            },
                            "name": "bash_run",
                        },
                        "updated_at": "2026-12-07T23:40:45.783218Z",
                    }
                ]
            }
        }
    },
    "nodes": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "alive": True,
                        "current": True,
                        "id": "node-a",
                        "last_heartbeat": "2026-12-07T23:41:15.280972Z",
                        "started_at": "2026-12-07T23:40:45.236426Z",
                        "stopping": False,
                        "url": None,
                        "version": "0.1.0",
                    }
                ]
            }
        }
    },
    "patchSession": {
        "200": {
            "application/json": {
                "busy": False,
                "created_at": "2026-12-07T23:40:45.783218Z",
                "cwd": "/home/agent/project",
                "env": {"PROJECT": "demo", "STAGE": "test"},
                "id": "se_l0DqD3OiwOvEJQiPExpT",
                "keep_cwd": True,
                "limits": {},
                "owner": "alice",
                "pty": False,
                "sandbox": None,
                "timeout_ms": 600000,
                "tool": {
                    "description": "Run a bash command in "
                    "this session and "
                    "stream its output as "
                    "NDJSON items {stdout, "
                    "stderr, exit_code, "
                    "signal, truncated}: "
                    "stdout and stderr "
                    "arrive apart; output "
                    "comes in chunks of at "
                    "most 4096 bytes, and "
                    "the last item carries "
                    "the exit status "
                    "(signal -1 means the "
                    "command timed out). "
                    "Exported variables, "
                    "functions and aliases "
                    "persist from one call "
                    "to the next; the "
                    "working directory is "
                    "reset to the session's "
                    "cwd on every call. The "
                    "complete output stays "
                    "readable in parts as "
                    "artifact://<id> "
                    "through `GET "
                    "/v1/executions/{id}/output?offset=&limit=` "
                    "(the id is in the "
                    "X-Execution-Id "
                    "header). Environment "
                    "variables and PTY mode "
                    "are session "
                    "configuration, not "
                    "call arguments. The "
                    "default timeout is "
                    "600000 milliseconds "
                    "(10 minutes). To "
                    "extend it for one "
                    "call, pass "
                    "`timeout_ms` with an "
                    "integer strictly "
                    "greater than 600000; "
                    "values at or below the "
                    "default are rejected: "
                    "the argument can only "
                    "raise the timeout, "
                    "never lower it. The "
                    "command must not start "
                    "with an absolute path "
                    "and must not match a "
                    "dangerous pattern; the "
                    "server's policy may "
                    "deny it or wait for a "
                    "human approval.",
                    "inputSchema": {
                        "additionalProperties": False,
                        "properties": {
                            "command": {
                                "description": "The "
                                "bash "
                                "command. "
                                "Not "
                                "an "
                                "absolute "
                                "path "
                                "(no "
                                "leading "
                                "`/`), "
                                "and "
                                "not "
                                "matching "
                                "a "
                                "dangerous "
                                "security "
                                "pattern.",
                                "type": "string",
                            },
                            "timeout_ms": {
                                "description": "Optional: "
                                "a "
                                "longer "
                                "timeout "
                                "for "
                                "this "
                                "call "
                                "only, "
                                "in "
                                "milliseconds; "
                                "must "
                                "be "
                                "strictly "
                                "greater "
                                "than "
                                "600000.",
                                "type": "integer",
                            },
                        },
                        "required": ["command"],
                        "type": "object",
                    },
                    "name": "bash_run",
                },
                "updated_at": "2026-12-07T23:41:15.820694Z",
            }
        },
        "request": {"application/json": {"env": {"PROJECT": "demo", "STAGE": "test"}}},
    },
    "readExecutionOutput": {"200": {"application/octet-stream": "hello\n"}},
    "replacePolicy": {
        "200": {
            "application/json": {
                "critical": "prompt",
                "default": "allow",
                "env": {
                    "deny": [
                        "BASH_ENV",
                        "ENV",
                        "BASH_FUNC_*",
                        "SHELLOPTS",
                        "BASHOPTS",
                        "PS0",
                        "PS1",
                        "PS2",
                        "PS4",
                        "PROMPT_COMMAND",
                        "IFS",
                        "PATH",
                        "LD_*",
                        "GCONV_PATH",
                        "PYTHONSTARTUP",
                        "PERL5OPT",
                        "NODE_OPTIONS",
                        "RUBYOPT",
                        "GIT_SSH_COMMAND",
                        "GIT_SSH",
                        "GIT_EXTERNAL_DIFF",
                        "GIT_EDITOR",
                        "GIT_SEQUENCE_EDITOR",
                        "GIT_PAGER",
                        "GIT_ASKPASS",
                        "GIT_PROXY_COMMAND",
                        "GIT_CONFIG_PARAMETERS",
                        "GIT_CONFIG_COUNT",
                        "GIT_CONFIG_KEY_*",
                        "GIT_CONFIG_VALUE_*",
                        "GIT_CONFIG_GLOBAL",
                        "GIT_CONFIG_SYSTEM",
                        "GIT_EXEC_PATH",
                        "GIT_TEMPLATE_DIR",
                        "RSYNC_RSH",
                        "RSYNC_CONNECT_PROG",
                        "LESSOPEN",
                        "LESSCLOSE",
                        "LESSEDIT",
                        "PAGER",
                        "MANPAGER",
                        "SYSTEMD_PAGER",
                        "EDITOR",
                        "VISUAL",
                        "FCEDIT",
                        "SSH_ASKPASS",
                        "SUDO_ASKPASS",
                        "BROWSER",
                        "TAR_OPTIONS",
                        "ZIPOPT",
                        "MANOPT",
                        "PARALLEL",
                    ],
                    "prompt": [],
                },
                "files": {"outside": "prompt", "rules": [], "workspace": "allow"},
                "interceptor": {"enabled": False, "rules": None},
                "keep_daemons": False,
                "remembered": [],
                "rules": [
                    {"approval": "prompt", "match": "terraform apply*"},
                    {"approval": "deny", "match": "rm -rf /*"},
                ],
                "sandbox": {"escalation": "prompt", "hidden": [], "network": None, "write": []},
                "unreadable": "prompt",
            }
        },
        "request": {
            "application/json": {
                "critical": "prompt",
                "default": "allow",
                "env": {
                    "deny": [
                        "BASH_ENV",
                        "ENV",
                        "BASH_FUNC_*",
                        "SHELLOPTS",
                        "BASHOPTS",
                        "PS0",
                        "PS1",
                        "PS2",
                        "PS4",
                        "PROMPT_COMMAND",
                        "IFS",
                        "PATH",
                        "LD_*",
                        "GCONV_PATH",
                        "PYTHONSTARTUP",
                        "PERL5OPT",
                        "NODE_OPTIONS",
                        "RUBYOPT",
                        "GIT_SSH_COMMAND",
                        "GIT_SSH",
                        "GIT_EXTERNAL_DIFF",
                        "GIT_EDITOR",
                        "GIT_SEQUENCE_EDITOR",
                        "GIT_PAGER",
                        "GIT_ASKPASS",
                        "GIT_PROXY_COMMAND",
                        "GIT_CONFIG_PARAMETERS",
                        "GIT_CONFIG_COUNT",
                        "GIT_CONFIG_KEY_*",
                        "GIT_CONFIG_VALUE_*",
                        "GIT_CONFIG_GLOBAL",
                        "GIT_CONFIG_SYSTEM",
                        "GIT_EXEC_PATH",
                        "GIT_TEMPLATE_DIR",
                        "RSYNC_RSH",
                        "RSYNC_CONNECT_PROG",
                        "LESSOPEN",
                        "LESSCLOSE",
                        "LESSEDIT",
                        "PAGER",
                        "MANPAGER",
                        "SYSTEMD_PAGER",
                        "EDITOR",
                        "VISUAL",
                        "FCEDIT",
                        "SSH_ASKPASS",
                        "SUDO_ASKPASS",
                        "BROWSER",
                        "TAR_OPTIONS",
                        "ZIPOPT",
                        "MANOPT",
                        "PARALLEL",
                    ],
                    "prompt": [],
                },
                "files": {"outside": "prompt", "rules": [], "workspace": "allow"},
                "interceptor": {"enabled": False, "rules": None},
                "keep_daemons": False,
                "rules": [
                    {"approval": "prompt", "match": "terraform apply*"},
                    {"approval": "deny", "match": "rm -rf /*"},
                ],
                "sandbox": {"escalation": "prompt", "hidden": [], "network": None, "write": []},
                "unreadable": "prompt",
            }
        },
    },
    "replayPolicy": {
        "200": {
            "application/json": {
                "data": [
                    {
                        "agrees": True,
                        "approval_id": "ap_ZL4TYAJb4KXx8aOmTTDh",
                        "command": "terraform apply -target=module.dns",
                        "created_at": "2026-12-07T23:40:45.591945Z",
                        "decided_by": "carol",
                        "draft_reason": "Allowed by bash pattern: terraform apply -target=*",
                        "draft_remembered_rule": None,
                        "draft_rule": {"approval": "allow", "match": "terraform apply -target=*"},
                        "draft_verdict": "allow",
                        "execution_id": "ex_8dLTD-kQVYOME4ximHft",
                        "human": "approved",
                        "requested_by": "alice",
                    },
                    {
                        "agrees": False,
                        "approval_id": "ap_zi8VXr6kLFgzCcZBsun_",
                        "command": "terraform apply -auto-approve",
                        "created_at": "2026-12-07T23:40:45.553237Z",
                        "decided_by": "carol",
                        "draft_reason": "No rule matched; default allow",
                        "draft_remembered_rule": None,
                        "draft_rule": None,
                        "draft_verdict": "allow",
                        "execution_id": "ex_GwtdVV1IQCMJ4GDBld6p",
                        "human": "denied",
                        "requested_by": "alice",
                    },
                ],
                "skipped": 0,
            }
        },
        "request": {
            "application/json": {
                "critical": "prompt",
                "default": "allow",
                "env": {
                    "deny": [
                        "BASH_ENV",
                        "ENV",
                        "BASH_FUNC_*",
                        "SHELLOPTS",
                        "BASHOPTS",
                        "PS0",
                        "PS1",
                        "PS2",
                        "PS4",
                        "PROMPT_COMMAND",
                        "IFS",
                        "PATH",
                        "LD_*",
                        "GCONV_PATH",
                        "PYTHONSTARTUP",
                        "PERL5OPT",
                        "NODE_OPTIONS",
                        "RUBYOPT",
                        "GIT_SSH_COMMAND",
                        "GIT_SSH",
                        "GIT_EXTERNAL_DIFF",
                        "GIT_EDITOR",
                        "GIT_SEQUENCE_EDITOR",
                        "GIT_PAGER",
                        "GIT_ASKPASS",
                        "GIT_PROXY_COMMAND",
                        "GIT_CONFIG_PARAMETERS",
                        "GIT_CONFIG_COUNT",
                        "GIT_CONFIG_KEY_*",
                        "GIT_CONFIG_VALUE_*",
                        "GIT_CONFIG_GLOBAL",
                        "GIT_CONFIG_SYSTEM",
                        "GIT_EXEC_PATH",
                        "GIT_TEMPLATE_DIR",
                        "RSYNC_RSH",
                        "RSYNC_CONNECT_PROG",
                        "LESSOPEN",
                        "LESSCLOSE",
                        "LESSEDIT",
                        "PAGER",
                        "MANPAGER",
                        "SYSTEMD_PAGER",
                        "EDITOR",
                        "VISUAL",
                        "FCEDIT",
                        "SSH_ASKPASS",
                        "SUDO_ASKPASS",
                        "BROWSER",
                        "TAR_OPTIONS",
                        "ZIPOPT",
                        "MANOPT",
                        "PARALLEL",
                    ],
                    "prompt": [],
                },
                "files": {"outside": "prompt", "rules": [], "workspace": "allow"},
                "interceptor": {"enabled": False, "rules": None},
                "keep_daemons": False,
                "rules": [{"approval": "allow", "match": "terraform apply -target=*"}],
                "sandbox": {"escalation": "prompt", "hidden": [], "network": None, "write": []},
                "unreadable": "prompt",
            }
        },
    },
    "resizeExecution": {"request": {"application/json": {"cols": 120, "rows": 40}}},
    "runInSession": {
        "200": {
            "application/x-ndjson": '{"stdout":"demo-test\\n","stderr":"","exit_code":null,"signal":null,"truncated":false}\n'
            '{"stdout":"","stderr":"","exit_code":0,"signal":null,"truncated":false}\n'
        },
        "request": {"application/json": {"command": "echo $PROJECT-$STAGE"}},
    },
    "searchExecutionOutput": {
        "200": {
            "application/json": {
                "complete": True,
                "matches": [{"line": 2, "offset": 10, "text": "error: missing ;"}],
                "query": "error",
                "skipped": None,
                "total_bytes": 32,
                "truncated": False,
            }
        }
    },
    "sendExecutionInput": {"request": {"application/json": {"data": "ls -la\n"}}},
    "statFile": {
        "200": {
            "application/json": {
                "mode": "0644",
                "mtime": "2026-12-07T23:40:45.644264Z",
                "path": "/home/agent/project/notes/todo.txt",
                "resolved_path": "/home/agent/project/notes/todo.txt",
                "sha256": None,
                "size": 9,
                "symlink": False,
                "type": "file",
            }
        },
        "202": {
            "application/json": {
                "approval_id": "ap_tBX2W-6LIfSJG4YEYtcn",
                "created_at": "2026-12-07T23:40:45.733492Z",
                "execution_id": None,
                "finished_at": None,
                "id": "fo_1zk69NQifug-Y2YxwecS",
                "message": None,
                "mode": None,
                "op": "stat",
                "owner": "alice",
                "path": "/etc/hostname",
                "reason": "read of /etc/hostname: outside the workspace",
                "resolved_path": "/etc/hostname",
                "sha256": None,
                "size": None,
                "state": "awaiting_approval",
                "verdict": "prompt",
            }
        },
    },
    "upload": {
        "201": {
            "application/json": {
                "approval_id": None,
                "created_at": "2026-12-07T23:40:45.637044Z",
                "execution_id": None,
                "finished_at": "2026-12-07T23:40:45.657746Z",
                "id": "fo_Inw1CjzWm6oR0nymBl4v",
                "message": None,
                "mode": "0644",
                "op": "write",
                "owner": "alice",
                "path": "/home/agent/project/notes/todo.txt",
                "reason": "write of /home/agent/project/notes/todo.txt: inside the workspace",
                "resolved_path": "/home/agent/project/notes/todo.txt",
                "sha256": "409baa381eaebfc8c71676ecb0eed6659ea7510b4b42f101b152c7f0696150c5",
                "size": 9,
                "state": "completed",
                "verdict": "allow",
            }
        },
        "202": {
            "application/json": {
                "approval_id": "ap_wurvyrk06mlegJIJd0Ws",
                "created_at": "2026-12-07T23:40:45.666411Z",
                "execution_id": None,
                "finished_at": None,
                "id": "fo_1A5QqhKwWLfdIEjTJsDR",
                "message": None,
                "mode": None,
                "op": "write",
                "owner": "alice",
                "path": "/etc/hostname",
                "reason": "write of /etc/hostname: outside the workspace",
                "resolved_path": "/etc/hostname",
                "sha256": None,
                "size": 9,
                "state": "awaiting_approval",
                "verdict": "prompt",
            }
        },
        "request": {"application/octet-stream": "buy milk\n"},
    },
}
