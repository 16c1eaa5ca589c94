"""The AMQP heartbeat's trade-off, measured against the broker on 127.0.0.1:5672 through
relays this script owns (its own connections and queues only, deleted at the end):

    python -m tests.integration.rabbitmq.heartbeat_tradeoff detect 5 10 30
    python -m tests.integration.rabbitmq.heartbeat_tradeoff stall 10:8 10:25

`detect H...`: for each heartbeat H (concurrently), a consumer idles 30 s (the bytes the
relay forwards are the heartbeat traffic), then the relay goes silent: how long until the
consumer notices. `stall H:S...`: a consumer with heartbeat H, then a computation that
holds the GIL for S seconds (a busy worker whose handler runs C code): does the connection
survive? Figures are in docs/rabbitmq.md; not a test (it asserts nothing)."""

from __future__ import annotations

import logging
import sys
import threading
import time

import pika

from adapters.rabbitmq import RabbitDelivery
from adapters.rabbitmq.relay import Relay

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
IDLE = 30.0  # seconds of idle traffic measured before a partition


def _consuming(url: str, heartbeat: int, prefix: str) -> RabbitDelivery:
    delivery = RabbitDelivery(
        url, prefix=prefix, heartbeat=heartbeat, recovery_attempts=100, idle_check=0.05
    )
    delivery.start(["default"])
    delivery.poll(4, 0.1)
    while not delivery.ready:
        time.sleep(0.05)
    return delivery


def _detect(heartbeat: int, out: dict[int, tuple[float, float]]) -> None:
    with Relay(URL) as relay:
        delivery = _consuming(relay.url, heartbeat, f"jobfsm.hbm{heartbeat}.")
        before = sum(relay.relayed)
        time.sleep(IDLE)
        idle = (sum(relay.relayed) - before) / IDLE
        with relay.partition():
            started = time.monotonic()
            while delivery.consumer.stats["failure:stream-lost"] < 1:
                time.sleep(0.05)
            out[heartbeat] = (time.monotonic() - started, idle)
        delivery.close()


def _stall(heartbeat: int, seconds: float, rate: float) -> int:
    with Relay(URL) as relay:
        delivery = _consuming(relay.url, heartbeat, f"jobfsm.hbs{heartbeat}.")
        sum(range(int(seconds * rate)))  # C code holding the GIL: the I/O thread waits
        time.sleep(heartbeat + 8)  # time for a close of either side to be seen
        lost = sum(v for k, v in delivery.consumer.stats.items() if k.startswith("failure:"))
        delivery.close()
        return lost


def _clean(prefixes: list[str]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    channel = conn.channel()
    for prefix in prefixes:
        channel.queue_delete(f"{prefix}default")
        channel.exchange_delete(f"{prefix}dead-letter")
        channel.queue_delete(f"{prefix}dead-letter")
    conn.close()


def main(mode: str, args: list[str]) -> None:
    logging.disable(logging.CRITICAL)
    if mode == "detect":
        out: dict[int, tuple[float, float]] = {}
        beats = [int(a) for a in args]
        threads = [threading.Thread(target=_detect, args=(h, out)) for h in beats]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _clean([f"jobfsm.hbm{h}." for h in beats])
        for h, (noticed, rate) in sorted(out.items()):
            print(
                f"heartbeat={h} s: partition noticed after {noticed:.1f} s; "
                f"idle heartbeat traffic {rate:.1f} B/s per connection"
            )
        return
    started = time.perf_counter()
    sum(range(50_000_000))
    rate = 50_000_000 / (time.perf_counter() - started)
    cases = [(int(a.split(":")[0]), float(a.split(":")[1])) for a in args]
    for h, s in cases:
        lost = _stall(h, s, rate)
        print(f"heartbeat={h} s: GIL held {s:g} s -> connection failures: {lost}")
    _clean([f"jobfsm.hbs{h}." for h, _ in cases])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
