"""Loading a tokenizer: the file, its config, its identity, and the backend that will encode it.

The reference (``tokenizers``) is always loaded: ``verify`` and the guard need it. With
``auto`` or ``fastokens``, fastokens parses the same file on a thread meanwhile
(`packcli.tokenizer.fast.build.FastLoad`), and is used only where it is proven exact for the file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packcli.choices import BackendChoice
from packcli.errors import InputError
from packcli.tokenizer.hub import TOKENIZER_FILES, resolve_tokenizer_path
from packcli.tokenizer.reference import ReferenceBackend
from packcli.tokenizer.types import GuardStats, TokenizerBackend

if TYPE_CHECKING:
    from packcli.tokenizer.fast.build import FastLoad

# Where transformers looks for a tokenizer's chat templates (`find_chat_templates`).
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_SOURCE = "tokenizer:"  # a template source relative to the tokenizer's directory


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer: its identity (content hash), special-token strings, and the backend that encodes.

    ``tokenizer`` is always the reference ``tokenizers.Tokenizer``; ``backend`` is what `encode_batch`
    runs (``backend_name``/``backend_version`` pin it; ``backend_reason`` says why it was chosen).
    """

    tokenizer: object = field(repr=False)
    source: str
    sha256: str
    bos_token: str | None
    eos_token: str | None
    config: dict | None = field(default=None, repr=False)
    backend: TokenizerBackend | None = field(default=None, repr=False)
    backend_reason: str = "requested"
    paranoid: bool = False
    guard: GuardStats = field(default_factory=GuardStats, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.backend is None:
            object.__setattr__(self, "backend", ReferenceBackend(self.tokenizer, offsets=False))

    @property
    def version(self) -> str:
        import tokenizers

        return tokenizers.__version__

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def backend_version(self) -> str:
        return self.backend.version

    def chat_templates(self) -> dict[str, tuple[str, str]]:
        """The tokenizer's own chat templates by name (`find_chat_templates`), read now: a loaded tokenizer
        is cached per process, and a template edited since must not be served from that cache."""
        return find_chat_templates(Path(self.source).parent)

    def has_added_token(self, text: str) -> bool:
        """Whether ``text`` is one of the tokenizer's added tokens (encoded as one id wherever it appears)."""
        return any(token.content == text for token in self.tokenizer.get_added_tokens_decoder().values())

    @property
    def guard_checked(self) -> int:
        return self.guard.checked

    def guard_counts(self) -> dict[str, int]:
        """The guard's counters so far in this process, plus the backend's fallbacks to the reference."""
        return {"examples": self.guard.examples, "checked": self.guard.checked,
                "offset_mismatches": self.guard.offset_mismatches,
                "reference_fallbacks": self.backend.reference_fallbacks}


def _why_not_a_tokenizer(text: str | None, exc: Exception) -> str:
    """What is wrong with a file that does not load: JSON of another kind (a tokenizer_config.json
    passed by mistake) says so, rather than the parser's complaint about a field it expected."""
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        data = None
    if isinstance(data, dict) and "model" not in data:
        kind = "a tokenizer_config.json" if "tokenizer_class" in data or "chat_template" in data else "another file"
        return f"JSON without a tokenizer's \"model\"; it looks like {kind}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def tokenizer_json(file: Path) -> bytes:
    """A tokenizer file's JSON, decompressed from a ``.gz``: the bytes its sha256 (what a manifest pins) is over,
    so a ``.gz`` and a plain copy pin the same tokenizer.

    Raises:
        OSError: unreadable, or not gzip. EOFError: a truncated ``.gz``.
    """
    raw = file.read_bytes()
    return gzip.decompress(raw) if file.name.endswith(".gz") else raw


AUTO_FAST_MIN_BYTES = 4 << 20
"""Input bytes from which ``auto`` loads fastokens. Loading it takes ~2.5 CPU seconds more than tokenizers
alone for Qwen3; tokenizing long conversations costs tokenizers ~0.6 CPU s per input MB and fastokens
~0.04, so the load pays for itself from ~4.5 MB (docs/tokenizer-backends.md, start-up)."""


def auto_backend(backend: BackendChoice | str, input_bytes: int | None) -> tuple[BackendChoice, str | None]:
    """The backend ``backend`` comes to for an input of ``input_bytes`` (None: not known): ``auto`` under
    `AUTO_FAST_MIN_BYTES` is tokenizers, with the reason; any other choice stands (reason None).

    Raises:
        ValueError: ``backend`` is not a `BackendChoice`.
    """
    backend = BackendChoice(backend)
    if backend is not BackendChoice.auto or input_bytes is None or input_bytes >= AUTO_FAST_MIN_BYTES:
        return backend, None
    return BackendChoice.tokenizers, (
        f"auto: tokenizers, because the input ({input_bytes / 2**20:.1f} MiB) is under "
        f"{AUTO_FAST_MIN_BYTES >> 20} MiB, where loading fastokens costs more than it saves")


def load_tokenizer(path: str | Path, *, backend: BackendChoice | str = BackendChoice.tokenizers,
                   paranoid: bool = False, input_bytes: int | None = None) -> LoadedTokenizer:
    """Load a ``tokenizer.json`` (or ``.json.gz``), or a directory holding one and its config.

    Padding and truncation configured inside the file are switched off: some published files pad
    every sequence to 128 tokens, which would silently corrupt lengths and labels.

    The sha256 is taken over the decompressed JSON so a ``.gz`` and a plain copy pin the same tokenizer.

    Args:
        path: the file or its directory.
        backend: ``tokenizers`` (the reference, the default: ``verify`` must reconstruct with it),
            ``fastokens`` (an error if it cannot be exact for this file), or ``auto`` (fastokens where
            the file is supported and passes the self-check, else the reference, with the reason in
            ``backend_reason``).
        paranoid: cross-check every example against the reference, not a sample.
        input_bytes: the size of the input it will encode: ``auto`` takes tokenizers below
            `AUTO_FAST_MIN_BYTES` (`auto_backend`; None: whatever the size).

    Raises:
        InputError: missing, unreadable or corrupt tokenizer; ``fastokens`` on a file it
            cannot encode exactly; an unknown ``backend``.
    """
    from tokenizers import Tokenizer

    try:
        backend, small = auto_backend(backend, input_bytes)
    except ValueError:
        raise InputError(f"tokenizer backend {backend!r}: unknown",
                         f"use one of {', '.join(b.value for b in BackendChoice)}") from None
    file = _find_tokenizer_file(path)
    pending, text = None, None
    try:
        raw = tokenizer_json(file)
        text = raw.decode("utf-8")
        if backend is not BackendChoice.tokenizers:  # fastokens parses on a thread while tokenizers does
            from packcli.tokenizer.fast.build import FastLoad

            pending = FastLoad(text, require_pin=backend is BackendChoice.auto)
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # gzip, UTF-8 and tokenizers (which raises a bare Exception) errors alike
        raise InputError(f"{file}: not a valid tokenizer.json ({_why_not_a_tokenizer(text, exc)})",
                         "pass a Hugging Face tokenizer.json, or a directory containing one") from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()
    chosen, reason = _choose_backend(pending, tokenizer, file)
    config = _read_config(file.parent / "tokenizer_config.json")
    return LoadedTokenizer(
        tokenizer=tokenizer, source=str(file), sha256=hashlib.sha256(raw).hexdigest(),
        bos_token=_token_text(config, "bos_token"), eos_token=_token_text(config, "eos_token"), config=config,
        backend=chosen, backend_reason=small or reason, paranoid=paranoid,
    )


_LOADED: dict[tuple, LoadedTokenizer] = {}


def cached_tokenizer(path: str | Path, *, backend: BackendChoice | str = BackendChoice.tokenizers,
                     paranoid: bool = False, input_bytes: int | None = None) -> LoadedTokenizer:
    """`load_tokenizer`, once per process for the same file and choice: a worker warmed with the
    tokenizer while the driver loads its own (`packcli.engine.Engine.session`) finds it here, and a
    Qwen3-sized load (seconds) is never paid twice in one process, however the path is spelled (it is
    keyed by the resolved file). Keyed by the file's size and modification time too, so a file
    replaced in place is loaded again."""
    file = _find_tokenizer_file(path)
    stat = file.stat()
    # the file's directory too: two snapshots of one Hub repository may link the same tokenizer.json
    # from folders whose tokenizer_config.json (special tokens, templates) differ
    key = (str(file.resolve()), str(file.parent.resolve()), stat.st_size, stat.st_mtime_ns,
           auto_backend(backend, input_bytes), paranoid)  # the choice as the input's size makes it, and why
    found = _LOADED.get(key)
    if found is None:
        found = _LOADED[key] = load_tokenizer(path, backend=backend, paranoid=paranoid, input_bytes=input_bytes)
    return found


def warm_tokenizer(path: str, backend: str, paranoid: bool) -> None:
    """Load, in a worker that has nothing to do yet, the tokenizer its first unit will need (picklable): ``backend``
    as `auto_backend` resolved it for the run's input, the key its units load it by (`packcli.prepare.TokenizerRef`)."""
    cached_tokenizer(path, backend=backend, paranoid=paranoid)


def _choose_backend(pending: FastLoad | None, tokenizer: object, file: Path) -> tuple[TokenizerBackend, str]:
    """The reference when ``pending`` is None (``tokenizers``), else the fast backend, or the reference with the
    reason under ``auto`` (``pending`` pins the fastokens version exactly then)."""
    reference = ReferenceBackend(tokenizer, offsets=False)
    if pending is None:
        return reference, "requested"
    from packcli.tokenizer.fast.build import UnsupportedTokenizer, load_fast_backend

    auto = pending.require_pin
    try:
        return load_fast_backend(pending, ReferenceBackend(tokenizer)), (
            "auto: fastokens supports this file and passed the self-check" if auto else "requested")
    except UnsupportedTokenizer as exc:
        if not auto:
            raise InputError(f"{file}: the fastokens backend cannot encode this tokenizer exactly: {exc}",
                             "use `backend='auto'` (falls back to tokenizers) or tokenizers") from exc
        return reference, f"auto: tokenizers, because {exc}"


def _find_tokenizer_file(spec: str | Path) -> Path:
    """The tokenizer.json(.gz) a ``--tokenizer`` value names: the file, in the directory, or in the
    cached snapshot of a Hub name (`packcli.tokenizer.hub`)."""
    path = resolve_tokenizer_path(spec)
    if path.is_dir():
        for name in TOKENIZER_FILES:
            if (path / name).is_file():
                return path / name
        raise InputError(f"{path}: no tokenizer.json in this directory", "pass the tokenizer.json file itself")
    if not path.is_file():
        raise InputError(f"tokenizer {path}: no such file", "pass a tokenizer.json file or its directory")
    return path


def find_chat_templates(directory: Path) -> dict[str, tuple[str, str]]:
    """A tokenizer directory's chat templates, ``{name: (text, source)}``, where transformers finds them.

    ``chat_template.jinja`` (named ``default``) and ``additional_chat_templates/NAME.jinja`` when
    either exists: transformers then ignores the config's entry. Otherwise ``chat_template`` in
    ``tokenizer_config.json``: a string (``default``) or a list of ``{name, template}``. A source reads
    ``tokenizer:FILE``: relative to the tokenizer's directory, so it names the same file on any machine.

    Raises:
        InputError: a template file that cannot be read, or a config entry of the wrong shape.
    """
    found: dict[str, tuple[str, str]] = {}
    try:
        if (directory / CHAT_TEMPLATE_FILE).is_file():
            found["default"] = ((directory / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8"),
                                TOKENIZER_SOURCE + CHAT_TEMPLATE_FILE)
        if (directory / CHAT_TEMPLATE_DIR).is_dir():
            for path in sorted((directory / CHAT_TEMPLATE_DIR).glob("*.jinja")):
                found[path.stem] = (path.read_text(encoding="utf-8"),
                                    f"{TOKENIZER_SOURCE}{CHAT_TEMPLATE_DIR}/{path.name}")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{directory}: cannot read a chat template ({exc})") from exc
    if found:
        return found
    config = _read_config(directory / "tokenizer_config.json") or {}
    entry = config.get("chat_template")
    source = TOKENIZER_SOURCE + "tokenizer_config.json"
    if entry is None:
        return {}
    if isinstance(entry, str):
        return {"default": (entry, source)}
    if isinstance(entry, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                       and isinstance(t.get("template"), str) for t in entry):
        return {t["name"]: (t["template"], source) for t in entry}
    raise InputError(f"{directory / 'tokenizer_config.json'}: chat_template is neither a string nor a list of "
                     "{name, template}", "fix the config, or pass a .jinja file with `template`")


def _read_config(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc
    return config if isinstance(config, dict) else None


def _token_text(config: dict | None, key: str) -> str | None:
    value = (config or {}).get(key)
    if isinstance(value, dict):  # older configs store AddedToken objects
        value = value.get("content")
    return value if isinstance(value, str) else None
