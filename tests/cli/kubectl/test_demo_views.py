"""``kubectl kilter --demo``: every view answers from the embedded demo cluster, no cluster or file needed."""

from __future__ import annotations

import pytest

from kilter.cli.kubectl.main import main
from kilter.cli.kubectl.served import ServedViews
from kilter.state.store import ClusterStore


@pytest.mark.parametrize(
    ("view", "seen"),
    [
        (["queues"], "llm-research"),
        (["pending", "-A"], "llama-405b-eval"),
        (["domains"], "GB200-NVL72"),
        (["top", "-A"], "gang/train-gb200-r"),  # each rack's running pods are a gang
        (["explain", "workload/llama-405b-eval", "-n", "llm"], "WaitingForQuota"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else "",
)
def test_every_view_reads_the_demo_cluster(view: list[str], seen: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*view, "--demo"]) == 0
    assert seen in capsys.readouterr().out


def test_demo_and_another_source_together_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queues", "--demo", "--snapshot", "cluster.yaml"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kubectl kilter queues: --demo reads the embedded demo cluster: leave out --snapshot, --kubeconfig and "
        "--context"
    )


def test_a_running_kilter_refuses_demo_since_it_answers_from_its_own_state() -> None:
    store = ClusterStore()
    store.replace([])
    status, body = ServedViews(store, None).answer(b'{"argv": ["queues", "--demo"]}')
    assert status == 400 and b"--demo" in body


@pytest.mark.parametrize(
    ("target", "namespace", "first_line"),
    [
        ("llama-405b-eval", "llm", "Target:    workload/llm/llama-405b-eval"),  # no pod of that name: the Workload
        ("gang/train-gb200-r024", "training", "Target:    gang/training/train-gb200-r024"),
        ("train-gb200-r024", "training", "Target:    gang/training/train-gb200-r024"),  # as top names it
    ],
)
def test_explain_finds_a_bare_name_as_whatever_kind_has_it(
    target: str, namespace: str, first_line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", target, "-n", namespace, "--demo"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == first_line


def test_explain_of_a_name_nothing_has_says_what_it_looked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "nothing-here", "-n", "llm", "--demo"]) == 1
    assert capsys.readouterr().err.strip() == (
        "kubectl kilter explain: nothing-here not found as any of pod, job, jobset, pytorchjob, workload, podgroup, "
        "gang in namespace llm"
    )
