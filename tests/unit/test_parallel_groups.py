"""How the suite is split across workers (`tests.support.parallel`): a module joins the played
topology's group or the cluster's only when one of its functions asks for their fixtures; a
word in a docstring, or a fixture that is cheap to start again (`herald_traced`), keeps it
on its own, so the heaviest group holds only what must share it."""

from __future__ import annotations

from tests.support.parallel import CLUSTER, PIPELINE, _parameters, claim_port_share, group_of


def test_fixtures_asked_for_decide_the_group_and_words_do_not() -> None:
    assert group_of("tests/pipeline/test_batch.py") == PIPELINE  # asks for played, batch_run
    assert group_of("tests/pipeline/test_report.py") == PIPELINE  # asks for batch_run
    # Asks for herald_traced only, and its docstring says "played": on its own.
    assert group_of("tests/pipeline/test_stream_on_herald.py") == \
        "tests/pipeline/test_stream_on_herald.py"
    assert group_of("tests/integration/proxy/upstream/test_cluster.py") == CLUSTER


def test_parameters_are_read_from_every_kind_of_function() -> None:
    text = '''
"""played by batch_run (words)"""
def test_a(played, /, x, *, kafka_cluster): ...
async def test_b(batch_run): ...
'''
    assert _parameters(text) == {"played", "x", "kafka_cluster", "batch_run"}
    assert _parameters("def broken(:") == set()


def test_workers_take_slices_that_leave_one_for_the_job_beside_them() -> None:
    """n workers take i/(n+1): the slice n/(n+1), which scripts/test.sh gives the class
    archive's trainer, is no worker's, and outside xdist nothing is claimed."""
    shares = []
    for i in range(3):
        env = {"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "3"}
        shares.append(claim_port_share(env))
        assert env["HERALD_PORT_SHARE"] == shares[-1]
    assert shares == ["0/4", "1/4", "2/4"]
    assert claim_port_share({}) is None
