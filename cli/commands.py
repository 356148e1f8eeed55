"""Every ``agentd`` command and its arguments, by group. Each command takes
only the options it uses: ``--config`` is the daemon's (``serve``),
``--json`` belongs to commands that print a result.

Implementations are named as ``module:function`` and load only when their
command runs (parser.Command); this module imports nothing but argparse.
"""

from __future__ import annotations

from .parser import MAX_QUERY, MAX_TITLE, Options, Subcommands, add_command, bounded_text, counting_number, non_empty


def add_daemon_commands(sub: Subcommands, o: Options) -> None:
    """``serve``, ``demo``, ``status``, ``providers``, ``web``, ``mcp``, ``acp``."""
    p = add_command(sub, "serve", "commands_daemon:cmd_serve", "run the daemon in the foreground", [o.daemon])
    p.add_argument("--config", metavar="FILE", help="config file (default: $AGENTD_CONFIG, else <data-dir>/config.toml)")
    p.add_argument("--ready-fd", type=int, metavar="FD", help="write 'ready' to this descriptor once listening")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS", help="how long an idle provider session lives (default 600)")
    p.add_argument("--websocket-port", type=int, metavar="PORT", help="also serve on ws://127.0.0.1:PORT/ (0: any free port)")
    p.add_argument("--web", action="store_true",
                   help="also serve the web console on the WebSocket's port (default port 7311); `agentd web` opens it")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")

    p = add_command(sub, "demo", "commands_daemon:cmd_demo", "a short end-to-end demo on a fresh daemon")
    p.add_argument("--data-dir", metavar="DIR", help="the demo daemon's state directory, kept afterwards (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the demo's data dir")

    add_command(sub, "status", "commands_daemon:cmd_status", "the daemon's pid, socket, WebSocket and sessions", [o.results])
    add_command(sub, "providers", "commands_daemon:cmd_providers", "provider instances, their binaries and capabilities",
                [o.results])
    p = add_command(sub, "web", "web_cmd:cmd_web", "print the web console's URL with its token; at a desktop, open the "
                    "console with a one-time login code", [o.results])
    p.add_argument("--no-open", action="store_true", help="only print the URL, never open a browser")

    p = add_command(sub, "mcp", "main:cmd_mcp", "agentd's MCP tools on stdio, relayed to the daemon's endpoint, for an MCP client agentd did not start (SPEC F9)")
    p.add_argument("--socket", metavar="PATH", help="the daemon's Unix socket (default: $AGENTD_SOCKET)")
    p.add_argument("--session", metavar="SESSION",
                   help="the provider session that delegates (default: $AGENTD_SESSION_ID; its credential comes from "
                        "the file $AGENTD_TOOL_CREDENTIAL names)")
    p.add_argument("--thread", metavar="THREAD", type=o.thread_id,
                   help="delegate from this thread (for an MCP client agentd did not start)")


    add_command(sub, "acp", "acp_agent:cmd_acp",
                "agentd as an editor's ACP agent on stdio (Zed, JetBrains, Neovim): sessions are agentd threads",
                [o.daemon])


def add_thread_commands(sub: Subcommands, o: Options) -> None:
    """``new``, ``threads``, ``show``, ``events``, ``doctor``, ``unquarantine``, ``archive``, ``unarchive``, then the admin commands."""
    p = add_command(sub, "new", "commands_threads:cmd_new", "create a thread; prints its id", [o.results])
    p.add_argument("--title", type=bounded_text("title", MAX_TITLE, blank=True), help="the thread's title")
    p.add_argument("--workspace", metavar="DIR", help="the directory the agent works in (default: a new one under the data dir)")
    p.add_argument("--provider", help="the provider instance to use (see `agentd providers`)")

    p = add_command(sub, "threads", "commands_threads:cmd_threads", "list threads with their status and queues", [o.results])
    p.add_argument("--ids", action="store_true", help="only the threads' ids, one a line (for scripts and shell completion)")
    p.add_argument("--archived", action="store_true", help="archived threads too")
    p = add_command(sub, "show", "commands_threads:cmd_show",
                    "a thread: runs, attempts and nodes as a tree, then its messages", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")

    p = add_command(sub, "events", "commands_threads:cmd_events", "print the event log", [o.results])
    p.add_argument("--thread", type=o.thread_id, help="only this thread's events")
    p.add_argument("--after", type=counting_number, default=0, metavar="SEQ", help="start after this sequence number")
    p.add_argument("--follow", action="store_true", help="keep printing new events until Ctrl-C")

    add_command(sub, "doctor", "doctor_cmd:cmd_doctor",
                "list every record of the data dir that cannot be read (changes nothing)", [o.results])
    p = add_command(sub, "unquarantine", "doctor_cmd:cmd_unquarantine",
                    "let commands reach a thread whose actor failed too often again", [o.results])
    p.add_argument("thread", type=o.thread_id, metavar="THREAD", help="the quarantined thread")
    p = add_command(sub, "archive", "archive_cmd:cmd_archive",
                    "hide a thread from `agentd threads`; its git worktree goes after a final checkpoint", [o.results])
    p.add_argument("thread", type=o.thread_id, metavar="THREAD", help="the thread to archive")
    p = add_command(sub, "unarchive", "archive_cmd:cmd_unarchive",
                    "list an archived thread again (its worktree comes back from its final checkpoint)", [o.results])
    p.add_argument("thread", type=o.thread_id, metavar="THREAD", help="the archived thread")
    add_thread_admin_commands(sub, o)


def add_thread_admin_commands(sub: Subcommands, o: Options) -> None:
    """``search``, ``export``, ``rename``, ``rm`` (issue 28)."""
    p = add_command(sub, "search", "thread_admin_cmds:cmd_search",
                    "full-text search of titles, messages, answers and handoffs", [o.results])
    p.add_argument("query", type=bounded_text("search query", MAX_QUERY), help='words (all must match), "a phrase", prefix*, OR, NOT')
    p.add_argument("--thread", type=o.thread_id, help="only this thread")
    p.add_argument("--limit", type=counting_number, default=20, help="at most this many hits (default 20)")
    p = add_command(sub, "export", "thread_admin_cmds:cmd_export", "a thread as Markdown or one JSON document",
                    [o.daemon])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p.add_argument("--format", choices=("markdown", "json"), default="markdown", help="default: markdown")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    p = add_command(sub, "rename", "thread_admin_cmds:cmd_rename", "give a thread a new title", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p.add_argument("title", type=bounded_text("title", MAX_TITLE), help="the new title")
    p = add_command(sub, "rm", "thread_admin_cmds:cmd_rm",
                    "delete a thread and its runs, messages and checkpoints (forks keep theirs)", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p.add_argument("--yes", action="store_true", help="do not ask (required when not at a terminal)")


def add_send_command(sub: Subcommands, o: Options) -> None:
    """``send``: its options may come before, between or after THREAD and TEXT."""
    p = add_command(sub, "send", "stream:cmd_send", "send a message and stream the answer until the run ends", [o.daemon])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p.add_argument("text", nargs="?", help="the message; - reads it from stdin")
    p.add_argument("--file", metavar="PATH", help="read the message from PATH (up to 1,048,576 characters)")
    p.add_argument("--image", metavar="PATH", action="append", default=[],
                   help="send the image at PATH with the message (PNG, JPEG, GIF or WebP; repeatable, up to 8 and "
                        "9 MiB together), where the thread's provider takes images")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--steer", action="store_true", help="steer the active run (native, or by restart)")
    how.add_argument("--restart", action="store_true", help="restart the active run with this message")
    how.add_argument("--queue", action="store_true", help="run after the active run (the default when busy)")
    p.add_argument("--detach", action="store_true", help="return once the run is accepted, printing its id")
    p.add_argument("--provider", metavar="NAME",
                   help="run this message on another configured provider; the thread moves to it with a context handoff")
    p.add_argument("--clean-context", action="store_true",
                   help="start on a fresh provider thread given a summary of the whole thread")
    p.add_argument("--merge-back", metavar="FORK", type=o.thread_id,
                   help="bring what FORK (a fork of THREAD) concluded and changed since its fork point (or its last "
                        "merge-back) with this message; no files are copied unless --files")
    p.add_argument("--files", action="store_true",
                   help="with --merge-back: also merge FORK's file changes here (three-way; on a conflict nothing is "
                        "written unless --markers); `agentd restore` of the pre_merge checkpoint it names undoes it")
    p.add_argument("--markers", action="store_true",
                   help="with --merge-back --files: on a conflict write git's conflict markers")


def add_run_commands(sub: Subcommands, o: Options) -> None:
    """``stop``, ``interrupt``, ``retry``, ``release``, ``cancel``, ``reorder``, ``implement``."""
    p = add_command(sub, "stop", "commands_runs:cmd_stop",
                    "the Stop button: interrupt, hold what is queued, stop delegated tasks", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p = add_command(sub, "interrupt", "commands_runs:cmd_interrupt",
                    "interrupt a running run, or one running node of it (a tool, a subagent)", [o.results])
    p.add_argument("run", metavar="RUN|NODE", type=o.run_id, help="the run's id, or a node's (nod_…)")
    p.add_argument("--hold-queue", action="store_true", help="also hold the thread's queued runs (as stop does)")
    p = add_command(sub, "retry", "commands_runs:cmd_retry",
                    "retry the thread's latest run after it failed or was interrupted (its next attempt)", [o.results])
    p.add_argument("run", type=o.run_id, help="the run's id")
    p = add_command(sub, "release", "commands_runs:cmd_release", "start the runs a stop held", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p = add_command(sub, "cancel", "commands_runs:cmd_cancel", "cancel a queued run (its text is kept)", [o.results])
    p.add_argument("run", type=o.run_id, help="the queued run's id")
    p = add_command(sub, "reorder", "commands_runs:cmd_reorder", "set the order queued runs start in", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p.add_argument("runs", nargs="+", type=o.run_id, metavar="RUN", help="every queued run of the thread, in the new order")
    p = add_command(sub, "implement", "commands_runs:cmd_implement", "start work from a proposed plan", [o.results])
    p.add_argument("plan", type=non_empty("plan"), help="the plan's id (see `agentd show THREAD`)")
    p.add_argument("--new-thread", action="store_true", help="in a new child thread instead of a new run here")


def add_request_commands(sub: Subcommands, o: Options) -> None:
    """``requests``, ``approve``, ``answer``."""
    p = add_command(sub, "requests", "commands_threads:cmd_requests",
                    "what waits for an answer on a thread, and how to answer", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p = add_command(sub, "approve", "commands_runs:cmd_approve", "answer an approval request", [o.results])
    p.add_argument("request", type=non_empty("request"), help="the request's id")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--deny", action="store_true", help="decline instead of accept")
    how.add_argument("--always", action="store_true",
                     help="allow it and what the provider deems the same for the rest of its session "
                          "(acceptForSession; where the request offers it)")
    p = add_command(sub, "answer", "commands_runs:cmd_answer", "answer a question (a user-input request)", [o.results])
    p.add_argument("request", type=non_empty("request"), help="the request's id")
    p.add_argument("answers", nargs="+", metavar="KEY=VALUE", help="one answer per question (a key twice: several values)")


def add_checkpoint_commands(sub: Subcommands, o: Options) -> None:
    """``checkpoints``, ``diff``, ``restore``, ``rollback`` (SPEC F13, F14)."""
    p = add_command(sub, "checkpoints", "checkpoint_cmds:cmd_checkpoints", "a thread's workspace checkpoints", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p = add_command(sub, "diff", "checkpoint_cmds:cmd_diff",
                    "what a checkpoint or a run changed (a coloured patch at a terminal)", [o.results])
    p.add_argument("checkpoint", metavar="CHECKPOINT|RUN",
                   help="a checkpoint's id (agentd checkpoints THREAD lists them), or a run's: its checkpoint")
    p.add_argument("--base", metavar="CHECKPOINT|RUN",
                   help="diff against this checkpoint or run's checkpoint (default: the one it was captured against)")
    p = add_command(sub, "restore", "checkpoint_cmds:cmd_restore",
                    "put a checkpoint's files back (after a safety checkpoint that undoes it)", [o.results])
    p.add_argument("checkpoint", help="the checkpoint whose files to put back")
    p.add_argument("--include", action="append", metavar="FOLDER",
                   help="also restore the files of this folder although it is a nested repository now "
                        "(its .git is never touched; repeat for more)")
    p = add_command(sub, "rollback", "rollback_cmd:cmd_rollback",
                    "take a thread back to the state after a run: files and the agent's memory", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p.add_argument("ordinal", type=counting_number, help="the run to go back to (its number; 0: before the first run)")
    p.add_argument("--yes", action="store_true", help="do not ask (required when not at a terminal)")
    p.add_argument("--allow-rebuild", action="store_true",
                   help="where the agent's history cannot be rolled back (a legacy Codex history), start it afresh "
                        "with a summary of the kept runs instead of refusing")


def add_lineage_commands(sub: Subcommands, o: Options) -> None:
    """``fork``, ``lineage``, ``handoff`` (SPEC F5, F6, F8)."""
    p = add_command(sub, "fork", "lineage_cmds:cmd_fork",
                    "fork a thread (prints the fork's id); its first message picks the agent", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread to fork")
    p.add_argument("--from", dest="source", metavar="RUN|latest", default="latest",
                   help="the run to fork after (default: the latest completed one)")
    p.add_argument("--side", action="store_true", help="a side chat: a fork shown only inside its parent")
    p.add_argument("--title", type=bounded_text("title", MAX_TITLE, blank=True),
                   help="the fork's title (default: fork of THREAD)")
    own = p.add_mutually_exclusive_group()
    own.add_argument("--worktree", dest="own", action="store_const", const="worktree",
                     help="work in a git worktree of its own on a branch agentd/… (a copy outside git)")
    own.add_argument("--copy", dest="own", action="store_const", const="copy",
                     help="work in a copy of the thread's folder (reflinks where the file system has them)")
    p = add_command(sub, "lineage", "lineage_cmds:cmd_lineage",
                    "a thread's parent, forks and handoffs (strategy and size)", [o.results])
    p.add_argument("thread", type=o.thread_id, help="the thread's id")
    p = add_command(sub, "handoff", "lineage_cmds:cmd_handoff", "print the exact text a handoff gave an agent", [o.results])
    p.add_argument("handoff", type=non_empty("handoff"), help="the handoff's id (agentd lineage THREAD shows them)")


def add_shell_commands(sub: Subcommands, o: Options) -> None:
    """``completion``: a completion script generated from this parser;
    ``schema``: the protocol as a JSON Schema document."""
    p = add_command(sub, "completion", "completion:cmd_completion",
                    "print a shell completion script: `source <(agentd completion bash)`")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete for")
    add_command(sub, "schema", "schema_cmd:cmd_schema",
                "print the protocol as one JSON Schema document (methods, results, events)")


#: the groups in the order ``agentd --help`` lists their commands
GROUPS = (add_daemon_commands, add_thread_commands, add_send_command, add_run_commands, add_request_commands,
          add_checkpoint_commands, add_lineage_commands, add_shell_commands)
