"""A mistyped flag is named, with the nearest flag the subcommand knows and the subcommand's own usage."""

from __future__ import annotations

import pytest

from kilter.cli.kubectl.main import main as kubectl_main
from kilter.cli.kubectl.served import ServedViews
from kilter.cli.main import main
from kilter.cli.parsing import unknown_option
from kilter.state.store import ClusterStore

JOB = "examples/jobs/pytorchjob-16x4.yaml"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["plan", "--demo", "--jbo", "x.yaml"],
            "kilter plan: error: unrecognized argument --jbo (did you mean --job?)",
        ),
        (
            ["plan", "--demo", "--platfrom", "gb200", "--job", JOB],
            "kilter plan: error: unrecognized argument --platfrom (did you mean --platform?)",
        ),
        (
            ["maintenance", "plan", "--demo", "--domainz", "r1"],
            "kilter maintenance plan: error: unrecognized argument --domainz (did you mean --domains?)",
        ),
        (["simulate", "--seed", "-1", "--polcy=kilter"], "kilter simulate: error: unrecognized argument --polcy"),
    ],
    ids=["required-flag-mistyped", "optional-flag-mistyped", "nested-subcommand", "with-equals"],
)
def test_a_mistyped_flag_is_named_under_its_subcommand_s_usage(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[-1].startswith(said)
    assert err.startswith(f"usage: kilter {argv[0]}")


def test_prefixes_are_argparse_s_to_take_or_call_ambiguous(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--demo", "--jo", JOB, "-o", "json"]) == 0  # --jo: only --job
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["plan", "--demo", "--plat", "GB200-NVL72", "--job", JOB])
    assert "ambiguous option: --plat could match --platform, --platforms" in capsys.readouterr().err


def test_the_platform_flag_takes_the_catalog_s_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("gb200", "GB200-NVL72", "gb200-nvl72"):
        assert main(["plan", "--demo", "--platform", name, "--job", JOB]) == 0
        assert "of GB200-NVL72" in capsys.readouterr().out.splitlines()[0]


def test_the_plugin_names_the_flag_locally_and_when_kilter_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["pending", "--snapshot", "x.yaml", "--namespaec", "ml"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "kubectl kilter: unrecognized argument --namespaec (did you mean --namespace?)"
    )
    store = ClusterStore()
    store.replace([])
    status, body = ServedViews(store, None).answer(b'{"argv": ["pending", "-A", "--outptu", "json"]}')
    assert status == 400 and body == b"unrecognized argument --outptu (did you mean --output?)\n"


def test_words_after_a_double_dash_and_values_are_not_options() -> None:
    known = ["--job", "--platform", "--platforms"]
    assert unknown_option(["--job", "x", "--", "--anything"], known) is None
    assert unknown_option(["--job", "-x", "value"], known) is None  # single-dash words are argparse's to judge
    assert unknown_option(["--jbo"], known) == "unrecognized argument --jbo (did you mean --job?)"
    assert unknown_option(["--zzz"], known) == "unrecognized argument --zzz"
