"""Plan keys: read from a file one per line, the first signs and any verifies, so a key can be rotated."""

from __future__ import annotations

from pathlib import Path

import pytest

from kilter.gangs.keys import MIN_KEY_CHARS, PlanKeys
from kilter.model.errors import InputError

OLD, NEW = "a" * 64, "b" * 64


def keys_in(tmp_path: Path, text: str) -> PlanKeys:
    path = tmp_path / "keys"
    path.write_text(text)
    return PlanKeys.from_file(path)


def test_the_first_key_signs_and_every_key_verifies(tmp_path: Path) -> None:
    before = keys_in(tmp_path, f"{OLD}\n")
    during = keys_in(tmp_path, f"{NEW}\n\n  {OLD}  \n")  # blank lines and surrounding spaces are skipped
    after = keys_in(tmp_path, f"{NEW}\n")
    signed_before = before.sign(b"message")
    assert during.verify(b"message", signed_before)  # records of the old key still verify during the rotation
    assert during.sign(b"message") == after.sign(b"message") != signed_before
    assert not after.verify(b"message", signed_before)  # and not once the old key is gone
    assert not during.verify(b"another message", signed_before)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no key in it", id="an empty file"),
        pytest.param("\n  \n", "no key in it", id="blank lines only"),
        pytest.param(f"{OLD}\nshort\n", f"the key on line 2 is shorter than {MIN_KEY_CHARS}", id="a short key"),
    ],
)
def test_a_key_file_without_usable_keys_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        keys_in(tmp_path, text)


def test_a_key_file_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--plan-key-file"):
        PlanKeys.from_file(tmp_path / "absent")
    (tmp_path / "binary").write_bytes(b"\xff\xfe" * 40)
    with pytest.raises(InputError, match="--plan-key-file"):
        PlanKeys.from_file(tmp_path / "binary")


def test_without_a_file_each_process_has_a_key_of_its_own() -> None:
    one, two = PlanKeys.load(None), PlanKeys.load(None)
    assert one.verify(b"m", one.sign(b"m")) and not two.verify(b"m", one.sign(b"m"))
