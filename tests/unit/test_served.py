"""A token's Celery result names what its worker served, so Flower's task list shows it and its search finds it."""

from workers.served import Served, served_line


def test_a_finished_request_names_its_batch_request_tenant_stage_status_reward_wait_and_service():
    row = str(Served("math.verify", "finished", "t3:step-41", "r17", "timeout", 0.0, 0.1204, 2.5))
    assert row == ("batch t3:step-41 request r17 tenant t3 stage math.verify status timeout reward 0 "
                   "wait 0.120s service 2.500s: finished")


def test_a_request_handed_on_says_passed_and_shows_no_reward_yet():
    row = str(Served("code.compile", "next", "t12:b", "r0", "passed", None, 0.0, 0.25))
    assert "status passed reward - " in row and row.endswith(": next")


def test_a_batch_opened_directly_on_the_farm_has_no_tenant():
    assert "tenant - " in str(Served("synthetic.compile", "finished", "step-1", "r0", "ok", 1.0, 0.0, 0.1))


def test_a_token_that_found_nothing_to_pick_says_idle_and_its_stage():
    assert str(Served("synthetic.execute", "idle")).startswith("stage synthetic.execute: idle")


def test_a_token_that_served_on_counts_the_others_by_status_and_names_the_last():
    first = Served("math.verify", "finished", "t3:a", "r0", "ok", 1.0, 0.0, 0.1)
    more = [Served("math.verify", "finished", "t3:a", f"r{i}", s, 0.0, 0.0, 0.1) for i, s in
            enumerate(["wrong", "ok", "wrong"], 1)]
    line = served_line([first, *more, Served("math.verify", "idle")])
    assert line.startswith(str(first) + "; served on 3 more (ok 1, wrong 2), the last: batch t3:a request r3 ")


def test_a_token_that_served_only_its_own_request_is_that_requests_line():
    first = Served("math.verify", "finished", "t3:a", "r0", "ok", 1.0, 0.0, 0.1)
    assert served_line([first]) == str(first) and served_line([first, Served("math.verify", "idle")]) == str(first)
