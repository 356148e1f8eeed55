"""Where agentd keeps its data and its socket."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with the terminating NUL


def default_data_dir() -> Path:
    """``$AGENTD_DATA_DIR``, else ``$XDG_STATE_HOME/agentd``, else ``~/.local/state/agentd``."""
    if os.environ.get("AGENTD_DATA_DIR"):
        return Path(os.environ["AGENTD_DATA_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "agentd"


def default_socket_path(data_dir: Path) -> Path:
    """``$AGENTD_SOCKET``, else ``$XDG_RUNTIME_DIR/agentd/agentd.sock``, else ``<data-dir>/run/agentd.sock``."""
    if os.environ.get("AGENTD_SOCKET"):
        return Path(os.environ["AGENTD_SOCKET"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "agentd" / "agentd.sock"
    return data_dir / "run" / "agentd.sock"


@dataclass(frozen=True)
class Paths:
    """Every path the daemon uses, derived from the data dir."""

    data_dir: Path
    socket: Path
    config: Path
    #: ``config`` is the default location, ``<data-dir>/config.toml``, which may be
    #: absent; a file asked for by ``--config`` or ``$AGENTD_CONFIG`` must exist
    config_is_default: bool = False

    @classmethod
    def resolve(cls, data_dir: str | os.PathLike[str] | None = None, socket: str | os.PathLike[str] | None = None,
                config: str | os.PathLike[str] | None = None) -> Paths:
        data = Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()
        sock = Path(socket).expanduser().absolute() if socket else default_socket_path(data)
        if config:
            cfg = Path(config).expanduser()
        elif os.environ.get("AGENTD_CONFIG"):
            cfg = Path(os.environ["AGENTD_CONFIG"])
        else:
            return cls(data_dir=data, socket=sock, config=data / "config.toml", config_is_default=True)
        return cls(data_dir=data, socket=sock, config=cfg)

    @property
    def store(self) -> Path:
        return self.data_dir / "store"

    @property
    def search_index(self) -> Path:
        """The full-text search index (SQLite FTS5), derived from the store: it may be deleted."""
        return self.data_dir / "search.sqlite3"

    @property
    def workspaces(self) -> Path:
        return self.data_dir / "workspaces"

    @property
    def checkpoints(self) -> Path:
        """The checkpoint engine's shadow repositories, one per workspace."""
        return self.data_dir / "checkpoints"

    @property
    def providers(self) -> Path:
        return self.data_dir / "providers"

    @property
    def tool_credentials(self) -> Path:
        """The sessions' tool credentials (0700; emptied at every start)."""
        return self.data_dir / "run" / "tool-credentials"

    def check_socket(self) -> None:
        """Raise ValueError if the socket path is too long for AF_UNIX."""
        if len(os.fsencode(self.socket)) > MAX_SOCKET_PATH:
            raise ValueError(
                f"socket path {self.socket} is longer than {MAX_SOCKET_PATH} bytes; pass a shorter --socket"
            )
