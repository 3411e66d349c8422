"""The notifications' pure core: the job's switch, who is told what, the message, the retry schedule and the
rate limit, the webhook's signature and its sealed key."""

from __future__ import annotations

import ipaddress
import json

import pytest

from shared.jobconfig.notifykinds import Kind, check_switch, parse_kinds, switch_kinds
from shared.jobconfig.sealing import SealedValueError, new_key
from shared.notify.decide import Change, JobFacts, delivery_id, recipients
from shared.notify.destinations import Destinations, parse_allow
from shared.notify.endpoints import endpoint_of, redacted
from shared.notify.render import chat_body, cloudevent_body, digest, duration, message
from shared.notify.schedule import RateLimit, RetryPolicy, next_try_ms, retry_delay_ms, retryable_status
from shared.notify.signing import new_secret, open_secret, seal_secret, signature, verify
from shared.notify.subscriptions import PLATFORM, Channel, Format, Subscription

pytestmark = pytest.mark.unit

SWITCH = "jobStatusChangeNotification"


@pytest.mark.parametrize(("switch", "problems"), [
    (None, []),
    ({}, []),
    ({"running": True, "succeeded": False, "failed": True, "stopped": None, "retried": False}, []),
    ([True], ["extras.jobStatusChangeNotification: must be an object of booleans by state (running, succeeded, "
              "failed, stopped, retried)"]),
    ({"finished": True}, ["extras.jobStatusChangeNotification.finished: is not a state; one of running, succeeded, "
                          "failed, stopped, retried"]),
    ({"failed": "true"}, ["extras.jobStatusChangeNotification.failed: must be true or false"]),
    ({"failed": 1}, ["extras.jobStatusChangeNotification.failed: must be true or false"]),
])
def test_the_switch_is_checked_like_every_field(switch: object, problems: list[str]) -> None:
    assert [str(p) for p in check_switch({SWITCH: switch})] == problems


def test_the_switch_turns_on_the_true_kinds_only() -> None:
    assert switch_kinds({}) is None
    assert switch_kinds({SWITCH: {"running": True, "failed": True, "stopped": False}}) == {Kind.RUNNING, Kind.FAILED}
    assert parse_kinds("running, failed") == {Kind.RUNNING, Kind.FAILED}
    assert parse_kinds("all") == set(Kind)
    with pytest.raises(ValueError, match="unknown kind 'done'"):
        parse_kinds("done")


def _job(switch: frozenset[Kind] | None = None, user: str = "alice", name: str = "train") -> JobFacts:
    return JobFacts(job_id=f"{user}~{name}~1a2b3c4d", user=user, name=name, virtual_cluster="default",
                    state="FAILED", created_ms=1_000_000, launched_ms=1_010_000, completed_ms=1_200_000,
                    switch=switch)


def _change(kind: Kind, attempt: int = 0) -> Change:
    return Change(job_id="alice~train~1a2b3c4d", kind=kind, attempt=attempt, event_id="e1", at_ms=1_200_000,
                  exit_code=1 if kind is Kind.FAILED else None, reason="the command exited with 1")


def _sub(sid: str, channel: Channel, kinds: set[Kind], *, owner: str = "alice", job: str = "",
         url: str = "") -> Subscription:
    return Subscription(id=sid, owner=owner, channel=channel, kinds=frozenset(kinds), url=url, job=job)


def test_changes_are_keyed_so_that_a_repeat_is_the_same_change() -> None:
    assert _change(Kind.RUNNING, 0).key == _change(Kind.RUNNING, 3).key == "alice~train~1a2b3c4d/running"
    assert _change(Kind.RETRIED, 1).key != _change(Kind.RETRIED, 2).key
    assert delivery_id("a", "email:x") == delivery_id("a", "email:x") != delivery_id("a", "email:y")


@pytest.mark.parametrize(("switch", "kind", "told"), [
    # no switch: each subscription's own kinds
    (None, Kind.FAILED, {"email:alice@example.com", "webhook:w1", "webhook:ops"}),
    (None, Kind.RUNNING, {"webhook:w2", "webhook:ops"}),
    # the job's switch chooses the kinds of the user's subscriptions (and mails the address), not the platform's
    (frozenset({Kind.RUNNING, Kind.FAILED}), Kind.RUNNING,
     {"email:alice@example.com", "webhook:w1", "webhook:w2", "webhook:ops"}),
    (frozenset({Kind.SUCCEEDED}), Kind.FAILED, {"webhook:ops"}),
])
def test_who_is_told(switch: frozenset[Kind] | None, kind: Kind, told: set[str]) -> None:
    subs = [_sub("m1", Channel.EMAIL, {Kind.FAILED}), _sub("m2", Channel.EMAIL, {Kind.FAILED, Kind.SUCCEEDED}),
            _sub("w1", Channel.WEBHOOK, {Kind.FAILED}, url="https://hooks.example/a"),
            _sub("w2", Channel.WEBHOOK, {Kind.RUNNING}, job="train", url="https://hooks.example/b"),
            _sub("w3", Channel.WEBHOOK, set(Kind), job="other", url="https://hooks.example/c"),
            _sub("bob", Channel.WEBHOOK, set(Kind), owner="bob", url="https://hooks.example/d"),
            _sub("ops", Channel.WEBHOOK, {Kind.FAILED, Kind.RUNNING}, owner=PLATFORM, url="https://ops.example/")]
    found = recipients(_change(kind), _job(switch), subs, "alice@example.com")
    assert {r.key for r in found} == told
    assert all(r.owner == (PLATFORM if r.subscription_id == "ops" else "alice") for r in found)


def test_no_address_no_email() -> None:
    assert recipients(_change(Kind.FAILED), _job(frozenset({Kind.FAILED})),
                      [_sub("m1", Channel.EMAIL, {Kind.FAILED})], "") == []


def test_the_message_says_state_exit_code_reason_duration_and_link() -> None:
    msg = message(_change(Kind.FAILED), _job(), "http://portal:9186/")
    assert msg.subject == "[paiq] job train failed with exit code 1"
    assert "Reason: the command exited with 1" in msg.text
    assert "Ran for 3m10s (attempt 0)." in msg.text
    assert "http://portal:9186/#/job/alice/train" in msg.text
    assert msg.data["exitCode"] == 1 and msg.data["kind"] == "failed" and msg.data["eventId"] == "e1"
    event = json.loads(cloudevent_body("d1", msg, "alice~train~1a2b3c4d", 1_200_000))
    assert event["id"] == "d1" and event["type"] == "paiq.notification" and event["data"]["reason"]
    assert json.loads(chat_body(msg)) == {"text": msg.text}
    assert duration(3 * 3600 + 125) == "3h02m" and duration(12) == "12s"


def test_a_digest_counts_all_and_lists_some() -> None:
    msg = digest([f"[paiq] job j{i} is retried" for i in range(30)], 30, 3600)
    assert msg.subject == "[paiq] 30 job changes (digest)"
    assert "- job j0 is retried" in msg.text and "j25" not in msg.text and "and 10 more" in msg.text


def test_retries_back_off_and_end() -> None:
    policy = RetryPolicy(base_ms=1000, max_ms=8000, max_tries=5, max_age_ms=60_000)
    delays = [retry_delay_ms(policy, n, "d") for n in range(1, 6)]
    assert all(b * 1.0 <= d <= b * 1.2 for d, b in zip(delays, [1000, 2000, 4000, 8000, 8000], strict=True))
    assert retry_delay_ms(policy, 3, "d") == retry_delay_ms(policy, 3, "d")  # replayable
    assert next_try_ms(policy, 1, 0, 10_000, "d") is not None
    assert next_try_ms(policy, 5, 0, 10_000, "d") is None  # out of tries
    assert next_try_ms(policy, 2, 0, 59_000, "d") is None  # the next try would be past its age
    assert [retryable_status(s) for s in (500, 503, 429, 408, 404, 400)] == [True, True, True, True, False, False]


def test_the_rate_limit_holds_past_the_limit() -> None:
    rate = RateLimit(limit=3, window_ms=60_000)
    assert rate.window(125_000) == 120_000
    assert [rate.held(n) for n in range(1, 6)] == [False, False, False, True, True]
    assert not RateLimit(limit=0).held(10_000)


def test_signatures_and_sealed_keys() -> None:
    secret = new_secret()
    body = b'{"a":1}'
    assert verify(secret, body, signature(secret, body))
    assert not verify(secret, body + b" ", signature(secret, body))
    key = new_key()
    sealed = seal_secret(secret, key)
    assert secret not in sealed and open_secret(sealed, key) == secret
    assert open_secret(sealed, f"{new_key()},{key}") == secret  # a rotated key opens what the old one sealed
    with pytest.raises(SealedValueError):
        open_secret(sealed, new_key())


def test_endpoints_line_up_by_origin_and_lists_hide_paths() -> None:
    assert endpoint_of("email", "a@b") == endpoint_of("email", "c@d") == "smtp"
    assert endpoint_of("webhook", "http://h:8/a") != endpoint_of("webhook", "http://h:8/b")
    assert redacted("https://hooks.slack.com/services/T/B/secret") == "https://hooks.slack.com/..."
    assert Format.CHAT.value == "chat"


@pytest.mark.parametrize(("url", "allow", "refused"), [
    ("https://hooks.example.com/x", "", None),
    ("http://8.8.8.8/x", "", None),
    ("http://127.0.0.1:8080/x", "", "127.0.0.1 is a loopback address"),
    ("http://localhost/x", "", "localhost is a loopback address"),
    ("http://169.254.169.254/latest/meta-data/", "", "169.254.169.254 is a link-local address"),
    ("http://10.1.2.3/", "", "10.1.2.3 is a private address"),
    ("http://172.20.0.5/", "", "172.20.0.5 is a private address"),
    ("http://192.168.1.1/", "", "192.168.1.1 is a private address"),
    ("http://100.64.0.1/", "", "100.64.0.1 is a private address"),
    ("http://[::1]/", "", "::1 is a loopback address"),
    ("http://[fd00::1]/", "", "fd00::1 is a unique-local address"),
    ("http://[fe80::1]/", "", "fe80::1 is a link-local address"),
    ("http://[::ffff:127.0.0.1]/", "", "::ffff:127.0.0.1 is a loopback address"),
    ("http://0.0.0.0/", "", "0.0.0.0 is not a unicast address"),
    ("http://127.0.0.1:8080/x", "127.0.0.1", None),
    ("http://10.1.2.3/", "10.0.0.0/8", None),
    ("http://10.1.2.3/", "10.2.0.0/16", "10.1.2.3 is a private address"),
    ("http://hooks.internal/", "hooks.internal", None),
    ("http://169.254.169.254/", "*", None),
])
def test_webhook_destinations_inside_the_cluster_are_refused_unless_allowed(url: str, allow: str,
                                                                         refused: str | None) -> None:
    why = Destinations(parse_allow(allow)).url_refusal(url)
    if refused is None:
        assert why is None
    else:
        assert why is not None and why.startswith(refused) and "PAIQ_NOTIFY_WEBHOOK_ALLOW" in why


def test_a_name_is_judged_by_what_it_resolves_to_and_the_allow_list_is_checked() -> None:
    rule = Destinations(parse_allow("127.0.0.1, hooks.internal"))
    assert rule.address_refusal("h.example", ipaddress.ip_address("93.184.216.34")) is None
    assert rule.address_refusal("evil.example", ipaddress.ip_address("169.254.169.254")) == (
        "evil.example (169.254.169.254) is a link-local address (the cloud metadata endpoint's range): webhooks "
        "may not point into the cluster's own network unless the operator allows it (PAIQ_NOTIFY_WEBHOOK_ALLOW)")
    assert rule.address_refusal("hooks.internal", ipaddress.ip_address("10.0.0.7")) is None
    assert rule.address_refusal("other", ipaddress.ip_address("127.0.0.1")) is None
    with pytest.raises(ValueError, match="CIDR"):
        parse_allow("10.0.0.0/8, not a host")
