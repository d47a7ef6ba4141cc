"""A restarted worker's detector re-finds an incident open before it: the ledger names the
incident it is (same job, kind and culprits, not opened by this process), and the book
carries on under that id. The worker drill: tests/integration/test_worker_restart.py."""

from commwatch.streams.detect.incidents import IncidentBook
from commwatch.streams.ledger import AlertLedger


def _ev(iid, status="open", ranks=(5,), nodes=("node-00",), kind="slow_rank", job="j", severity="P2", opened=100):
    return {"incident": iid, "status": status, "job": job, "kind": kind, "culprit_ranks": list(ranks),
            "culprit_nodes": list(nodes), "severity": severity, "opened_ns": opened}


def test_an_incident_open_before_the_restart_is_the_one_found_again():
    led = AlertLedger()
    led.note(_ev("j-slow_rank-5-100"))  # read back from the alerts topic at start
    again = _ev("j-slow_rank-5-900", nodes=(), opened=900)  # its node not known yet after the restart
    assert led.adopted(again)["incident"] == "j-slow_rank-5-100"
    assert led.adopted(_ev("j-slow_rank-6-900", ranks=(6,))) is None  # another rank
    assert led.adopted(_ev("k-slow_rank-5-900", job="k")) is None  # another job
    assert led.adopted(_ev("j-slow_rank-5-100")) is None  # an id already known repeats, it is not adopted


def test_what_was_resolved_or_opened_here_or_names_no_one_is_not_adopted():
    led = AlertLedger()
    led.note(_ev("j-slow_rank-5-100"))
    led.note(_ev("j-slow_rank-5-100", status="resolved"))
    assert led.adopted(_ev("j-slow_rank-5-900")) is None  # resolved before: a new episode
    assert led.admit(_ev("j-slow_rank-7-200", ranks=(7,)))  # opened by this process
    assert led.adopted(_ev("j-slow_rank-7-300", ranks=(7,))) is None
    led.note(_ev("j-slow_rank-100", ranks=(), nodes=()))  # a slowdown nobody explains
    assert led.adopted(_ev("j-slow_rank-900", ranks=(), nodes=())) is None
    led.note(_ev("j-node_lost-n3-100", kind="node_lost", ranks=(), nodes=("n3",)))
    assert led.adopted(_ev("j-node_lost-n3-900", kind="node_lost", ranks=(), nodes=("n3",)))["incident"] \
        == "j-node_lost-n3-100"


def test_the_book_carries_an_adopted_incident_on_under_its_old_id():
    book = IncidentBook("j", resolve_after_s=5)
    kw = dict(kind="slow_rank", culprit_ranks=[5], culprit_nodes=[], comm="", summary="s", evidence={})
    opened = book.assert_(("slow", 5), 900, severity="P3", id_hint="5-900", **kw)
    assert opened[0]["incident"] == "j-slow_rank-5-900"
    assert book.adopt("j-slow_rank-5-900", "j-slow_rank-5-100", 100, "P2")  # it was P2 before the restart
    assert not book.adopt("j-nothing", "j-x", 1, "P3")
    assert book.open[("slow", 5)].severity == "P2"  # the higher of the two (stage 2 only raises it while open)
    assert book.assert_(("slow", 5), 901, severity="P2", id_hint="5-901", **kw) == []
    upd = book.assert_(("slow", 5), 902, severity="P1", id_hint="5-902", **kw)
    assert [(e["incident"], e["status"], e["opened_ns"], e["severity"]) for e in upd] == [
        ("j-slow_rank-5-100", "update", 100, "P1")]
    gone = book.expire(10**12)
    assert [(e["incident"], e["status"]) for e in gone] == [("j-slow_rank-5-100", "resolved")]
