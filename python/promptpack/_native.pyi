"""Type stubs for the native module (promptpack/__init__.py re-exports these names)."""

from os import PathLike
from typing import Any, Mapping, Optional, Tuple, Union

_Path = Union[str, "PathLike[str]"]

class PromptpackError(Exception):
    """Something promptpack could not do. `kind` names what, with the kinds pack-client
    reports (`unreachable`, `deadline`, `document_rejected`, `hash_mismatch`, `config`,
    `builtin`, ...)."""

    kind: str

class RenderError(PromptpackError):
    """A template did not render: `missing` (no such file), `render_failed` (a variable the
    template needs is absent, or another template error)."""

class Snapshot:
    """One pack, captured: everything read from it comes from that pack."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def sequence(self) -> int: ...
    @property
    def source(self) -> str:
        """`"remote"` or `"builtin"`."""
    @property
    def sha256(self) -> str: ...
    @property
    def schema(self) -> int: ...
    def keys(self) -> list[str]: ...
    def read(self, path: str) -> bytes: ...
    def render(self, name: str, vars: Optional[Mapping[str, Any]] = None) -> str:
        """Strict: a missing variable raises RenderError; nothing falls back."""

class Client:
    def __init__(
        self,
        *,
        cache_dir: _Path,
        builtin_dir: Optional[_Path] = None,
        config: Optional[_Path] = None,
        client_version: str = "0.0.0",
        contract: Optional[_Path] = None,
    ) -> None:
        """`contract`: "agent", "files", or an app contract file; by default the config's,
        else the `contract.json` that `builtin_dir` ships, else the agent's."""
    def capture(self) -> Snapshot: ...
    def builtin(self) -> Snapshot: ...
    def serve(
        self, name: str, vars: Optional[Mapping[str, Any]] = None
    ) -> Tuple[str, Snapshot, Optional[str]]:
        """(text, the snapshot it came from, why the bundled prompts served instead)."""
    def refresh(self) -> dict[str, Any]:
        """`outcome` (installed, not_modified, unchanged, builtin, skipped), its details,
        and `message`, a sentence. Raises PromptpackError when the refresh failed."""
    def start(self) -> bool:
        """Starts the schedule and the watch in the background; True when watching."""
    def stop(self) -> None: ...
    def status(self) -> dict[str, Any]:
        """What `pack-client status --json` prints."""
