"""docs/configuration.md is generated from the option table (proxy/settings/reference.py): the
committed file is what the generator writes today, and every option an operator can set is in
it, so a new flag cannot ship undocumented and a changed default cannot go stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.settings.notes import NOTES
from proxy.settings.options import OPTIONS
from proxy.settings.reference import TARGET, documented, main, render


def test_the_committed_reference_is_current() -> None:
    assert TARGET.read_text() == render(), "run: python -m proxy.settings.reference"


def test_the_check_fails_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(render().replace("`--port`", "`--old-port`"))
    monkeypatch.setattr("proxy.settings.reference.TARGET", stale)
    assert main(["--check"]) == 1
    assert main([]) == 0 and main(["--check"]) == 0


def test_every_settable_option_is_listed_with_its_variables() -> None:
    text = TARGET.read_text()
    for opt in OPTIONS:
        if not documented(opt):
            continue
        if opt.help is not None:
            assert f"`{opt.flag_name}`" in text, opt.name
        for name in opt.env_names:
            assert f"`{name}`" in text, name


def test_every_note_belongs_to_an_option() -> None:
    assert set(NOTES) <= {opt.name for opt in OPTIONS}
