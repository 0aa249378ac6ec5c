"""Every view of ``kubectl kilter`` on a snapshot: the answers, the formats, the scopes and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.kubectl.main import main as kubectl_main
from kilter.cli.main import main as kilter_main
from kilter.gangs import records
from tests.cli.kubectl import scenario

VIEWS = (["queues"], ["pending"], ["top"], ["domains"], ["explain", "llama-0"])


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario.write(tmp_path_factory.mktemp("kubectl") / "cluster.json")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = kubectl_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def data(capsys: pytest.CaptureFixture[str], snap: Path, *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--snapshot", str(snap), "--now", scenario.NOW, "-o", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_queues_json_is_kilter_queues_json(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours = data(capsys, snap, "queues")
    assert kilter_main(["queues", "--snapshot", str(snap), "--now", scenario.NOW, "-o", "json"]) == 0
    assert ours == json.loads(capsys.readouterr().out)


def test_queues_table_shows_borrowed_lent_and_counts(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queues", "--snapshot", str(snap), "--now", scenario.NOW)
    assert code == 0
    row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["ClusterQueue", "llm-research"])
    # 896 GPUs used of 576 nominal: borrows 320; 3 admitted, 1 pending (llama-405b-eval)
    assert row[3:7] == ["576", "896", "320", "0"] and row[-2:] == ["1", "3"]


def _pending(capsys: pytest.CaptureFixture[str], snap: Path) -> dict[str, dict[str, Any]]:
    return {f"{p['namespace']}/{p['name']}": p for p in data(capsys, snap, "pending", "-A")["pending"]}


def test_a_workload_over_quota_names_queue_resource_and_amount(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queues = {q["name"]: q for q in data(capsys, snap, "queues")["clusterQueues"]}
    free = next(r["available"] for r in queues["llm-research"]["resources"] if r["resource"] == "nvidia.com/gpu")
    pending = _pending(capsys, snap)
    sweep, wl = pending["vision/vision-sweep"], pending["llm/llama-405b-eval"]
    # vision-sweep (96 GPUs) comes first and fits, taking 96 of the research cohort's free GPUs: llm-research then
    # has free - 96 left, and llama-405b-eval asks 72.
    assert sweep["reason"] == "NextInLine" and sweep["position"] < wl["position"]
    left = free - sweep["gpus"]
    assert wl["reason"] == "WaitingForQuota" and wl["gpus"] == 72
    assert wl["shortfall"] == [
        {"flavor": "gb200", "resource": "nvidia.com/gpu", "requested": 72, "available": left, "over": 72 - left}
    ]
    assert "ClusterQueue llm-research" in wl["message"] and f"({72 - left} over)" in wl["message"]


def test_topology_admission_checks_and_preemption_reasons(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pending = _pending(capsys, snap)
    huge = pending["tas/huge"]
    assert huge["reason"] == "TopologyPlacementFailed" and huge["domains"] == []
    assert "144 GPUs" in huge["message"] and "holds 18 such pods" in huge["message"]  # 18 trays x 4 GPUs a rack
    checked = pending["tas/checked"]
    assert checked["position"] == 1 and checked["reason"] == "UnsatisfiedAdmissionChecks"
    assert "kilter-topology is Pending: waiting for room" in checked["message"]
    v8 = pending["train/gpt-prod-v8"]
    assert v8["reason"] == "WaitingForPreemptedWorkloads" and v8["preempts"]


def test_pending_scopes_to_the_namespace(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scoped = data(capsys, snap, "pending", "-n", "tas")["pending"]
    assert {p["name"] for p in scoped} == {"huge", "checked"}
    assert data(capsys, snap, "pending")["pending"] == []  # the default namespace holds none


def test_top_shows_domains_used_over_minimum(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gangs = data(capsys, snap, "top", "-A")["gangs"]
    llama = next(g for g in gangs if g["gang"] == "llm/gang/llama")
    # 8 pods x 4 GPUs bound 6 + 2 over two racks; one 72-GPU rack would hold all 32 GPUs
    assert (llama["pods"], llama["gpus"], llama["domainsUsed"], llama["domainsMin"]) == (8, 32, 2, 1)
    assert llama["domains"] == scenario.GANG_DOMAINS
    code, out, _ = run(capsys, "top", "-n", "llm", "--snapshot", str(snap), "--now", scenario.NOW)
    assert code == 0 and out.splitlines()[1].split() == ["gang/llama", "8", "32", "2/1", "3h"]


def test_explain_a_pod_tells_its_gangs_placement(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    story = data(capsys, snap, "explain", "-n", "llm", "llama-3")
    assert story["gang"] == "llm/gang/llama" and story["pods"] == {"total": 8, "bound": 8, "pending": 0}
    assert sorted(p["pods"] for p in story["placement"]) == [2, 6]
    assert [p["domain"] for p in story["placement"]] == scenario.GANG_DOMAINS


def test_explain_a_pending_workload_gives_quota_topology_and_other_domains(
    snap: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    story = data(capsys, snap, "explain", "-n", "tas", "workload/huge")
    assert story["quota"]["reason"] == "" and "fits ClusterQueue tas-test" in story["quota"]["message"]
    assert story["topology"]["reason"] == "TopologyPlacementFailed"
    best = story["otherDomains"][0]
    assert best["podsFit"] == 18 and best["freeGpus"] == 72  # a whole idle rack: 18 of the 36 pods
    assert all(d["podsFit"] < 36 for d in story["otherDomains"])


@pytest.mark.parametrize(
    "target", ["nosuchpod", "workload/nosuch", "jobset/nosuch", "podgroup/nosuch"], ids=lambda t: t
)
def test_explain_of_nothing_exits_1(snap: Path, capsys: pytest.CaptureFixture[str], target: str) -> None:
    code, out, err = run(capsys, "explain", "-n", "llm", target, "--snapshot", str(snap))
    assert code == 1 and out == "" and err.count("\n") == 1 and "not found" in err


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "deployment/x"],
        ["pending", "-n", "Not_A_Namespace"],
        ["queues", "-o", "xml"],
        ["domains", "--platform", "no-such-platform"],
        ["explain", "llama-0", "--kilter-service", "kilter"],
        ["nosuchview"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_input_exits_2_with_one_line(snap: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, out, err = run(capsys, *args, "--snapshot", str(snap))
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


def test_a_missing_snapshot_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "queues", "--snapshot", str(tmp_path / "absent.yaml"))
    assert code == 2 and err.count("\n") == 1


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v[0])
def test_every_view_prints_table_wide_json_yaml_and_no_headers(
    snap: Path, capsys: pytest.CaptureFixture[str], view: list[str]
) -> None:
    base = [*view, "-n", "llm", "--snapshot", str(snap), "--now", scenario.NOW]
    code, as_json, _ = run(capsys, *base, "-o", "json")
    assert code == 0
    code, as_yaml, _ = run(capsys, *base, "-o", "yaml")
    assert code == 0 and yaml.safe_load(as_yaml) == json.loads(as_json)
    code, table, _ = run(capsys, *base)
    code_w, wide, _ = run(capsys, *base, "-o", "wide")
    assert code == code_w == 0 and table.strip() and wide.strip()
    if view[0] != "explain":  # a story, not a table
        assert len(wide.splitlines()[0]) > len(table.splitlines()[0])  # wide adds columns
        code, bare, _ = run(capsys, *base, "--no-headers")
        assert code == 0 and bare.splitlines() == table.splitlines()[1:]


def test_domains_filters_by_platform_and_draws_a_map(snap: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mi = data(capsys, snap, "domains", "--platform", "mi355x")["domains"]
    assert mi and {d["platform"] for d in mi} == {"MI355X-8"}
    code, out, _ = run(capsys, "domains", "--map", "--platform", "GB200-NVL72", "--snapshot", str(snap))
    _, page2, _ = run(capsys, "domains", "--map", "--platform", "GB200-NVL72", "--page", "2", "--snapshot", str(snap))
    assert out.splitlines()[-1] == "page 1/2 (34 racks; --page N for another)"  # 32 racks a page
    assert page2.splitlines()[-1].startswith("page 2/2")
    lines = out.splitlines() + page2.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines)
    racks = [line.split() for line in lines if line.startswith("gb200-r") and len(line.split()[1]) > 1]
    assert len(racks) == 32 and all(len(r[1]) in (17, 18) for r in racks)  # 32 racks, a cell per tray
    assert sum(1 for line in lines if line.startswith("gb200-r")) == 34  # and the two detached trays, a row each
    gang_rack = next(r for r in racks if r[0] == "gb200-r016")
    assert gang_rack[1].startswith("######")  # the llama gang's six whole trays


def test_the_map_marks_trays_a_recorded_plan_holds_as_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = scenario.objects()
    huge = next(o for o in objects if o["kind"] == "Workload" and o["metadata"]["name"] == "huge")
    record = records.PlanRecord("tas/workload/huge", 1_796_122_800.0, (("gb200-r020-t00", 4), ("gb200-r020-t01", 4)))
    huge["metadata"]["annotations"] = {records.PLAN_ANNOTATION: records.encode(record)}
    snap = tmp_path / "planned.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    before = {line.split()[0]: line.split()[1] for line in _map(capsys, scenario.write(tmp_path / "plain.json"))}
    after = {line.split()[0]: line.split()[1] for line in _map(capsys, snap)}
    assert before["gb200-r020"][:2] == ".." and after["gb200-r020"] == "pp" + before["gb200-r020"][2:]
    assert {k: v for k, v in after.items() if k != "gb200-r020"} == {
        k: v for k, v in before.items() if k != "gb200-r020"
    }


def _map(capsys: pytest.CaptureFixture[str], snap: Path) -> list[str]:
    code, out, _ = run(capsys, "domains", "--map", "--platform", "GB200-NVL72", "--snapshot", str(snap))
    assert code == 0
    return [line for line in out.splitlines() if line.startswith("gb200-r")]


def test_domains_shows_the_spares_the_flag_keeps_and_the_map_draws_them(
    snap: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gb200 = data(capsys, snap, "domains", "--platform", "GB200-NVL72", "--spare-nodes-per-domain", "2")["domains"]
    racks = [d for d in gb200 if not d["detached"]]
    assert sum(d["spares"] for d in racks) > 0 and all(d["spares"] + d["sparesUsed"] <= 2 for d in racks)
    for d in racks:  # held spares are the top wholly free trays: "spare" cells, none "free" above them
        cells = d["trays"]
        assert cells.count("spare") == d["spares"]
        if d["spares"]:
            assert "free" not in cells[cells.index("spare") :]
    assert all(d["spares"] == 0 and d["sparesUsed"] == 0 for d in gb200 if d["detached"])
    code, out, _ = run(capsys, "domains", "--map", "--spare-nodes-per-domain", "2", "--snapshot", str(snap))
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.startswith("gb200-r") and len(line.split()[1]) > 1]
    assert any(r[1].endswith("ss") for r in rows)


def test_explain_tells_what_a_recorded_repair_replaced_by_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = scenario.objects()
    huge = next(o for o in objects if o["kind"] == "Workload" and o["metadata"]["name"] == "huge")
    slots = (("gb200-r020-t00", 4), ("gb200-r020-t16", 4))
    moved = ((1, "gb200-r020-t01", "same scale-up domain"),)
    record = records.PlanRecord("tas/workload/huge", 1_796_122_800.0, slots, repaired=moved)
    huge["metadata"]["annotations"] = {records.PLAN_ANNOTATION: records.encode(record)}
    snap = tmp_path / "repaired.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    story = data(capsys, snap, "explain", "-n", "tas", "workload/huge")
    assert story["planRecord"]["repaired"] == [
        {"slot": 1, "was": "gb200-r020-t01", "now": "gb200-r020-t16", "how": "same scale-up domain"}
    ]
    code, out, _ = run(capsys, "explain", "-n", "tas", "workload/huge", "--snapshot", str(snap), "--now", scenario.NOW)
    assert code == 0
    assert "repair: slot 1 replaced gb200-r020-t01 by gb200-r020-t16 (same scale-up domain)" in out


HOSTILE = "waiting\x1b[2J\x1b]0;owned\x07\rfor room\u202e"


@pytest.mark.parametrize("view", [["pending", "-A"], ["pending", "-A", "-o", "wide"]])
def test_text_from_the_cluster_reaches_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], view: list[str]
) -> None:
    """An admission check's message is written by whoever runs the check: its escape sequences (clear the screen,
    retitle the window), bells, carriage returns and bidi overrides are printed as escapes, never raw."""
    objects = scenario.objects()
    for obj in objects:
        for check in obj.get("status", {}).get("admissionChecks", []):
            check["message"] = HOSTILE
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    code, out, err = run(capsys, *view, "--snapshot", str(path), "--now", scenario.NOW)
    assert code == 0, err
    assert "owned" in out, "the message is shown"
    assert not any(ch in out for ch in "\x1b\x07\r\u202e"), out
    assert "\\x1b[2J\\x1b]0;owned\\x07\\x0dfor room\\u202e" in out
