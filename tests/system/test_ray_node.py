"""``mirror node``'s watch on its Ray node (:mod:`mirror.stack.ray_node`), on a Ray cluster of its
own: the raylet of the driver's node killed, the watch says the node is lost within seconds (the
head takes ~15 s to declare it dead), and the driver is still there to stop and exit."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mirror.processes import free_port
from tests.support.cluster import Session, wait_for

DRIVER = """
import sys, threading
import ray
from mirror.stack.ray_node import RayNodeWatch
ray.init(address=sys.argv[1], namespace="mirror", log_to_driver=False)
lost = threading.Event()
watch = RayNodeWatch(lambda reason: (print("lost:", reason, flush=True), lost.set())).start()
print("watching", flush=True)
lost.wait(120)
watch.stop()
ray.shutdown()
print("stopped", flush=True)
"""


def test_the_watch_says_the_node_is_lost_when_its_raylet_dies(tmp_path: Path) -> None:
    ray_dir = Path(tempfile.mkdtemp(prefix="mirror-ray-", dir="/tmp"))  # Ray's unix sockets: a short path
    env = os.environ | {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    address = f"127.0.0.1:{free_port()}"
    head = Session.start("head", ["ray", "start", "--head", "--block", "--port", address.rsplit(":", 1)[1],
                                  "--num-cpus", "1", "--include-dashboard=false", "--temp-dir", str(ray_dir)],
                         env=env, cwd=tmp_path, log=tmp_path / "head.log")
    driver_log = tmp_path / "driver.log"
    driver = None
    try:
        wait_for(lambda: "Ray runtime started" in head.tail(100_000), 90, "the head started", head)
        driver = Session.start("driver", [sys.executable, "-c", DRIVER, address], env=env, cwd=Path.cwd(),
                               log=driver_log)
        wait_for(lambda: "watching" in driver_log.read_text(), 60, "the driver watches", head, driver)
        raylets = [pid for pid in head.pids() if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet"]
        assert len(raylets) == 1, head.pids()
        os.kill(raylets[0], 9)
        killed_at = time.monotonic()
        wait_for(lambda: "lost:" in driver_log.read_text(), 30, "the watch says the node is lost", driver)
        noticed_s = time.monotonic() - killed_at
        assert noticed_s < 10, noticed_s
        assert "raylet" in driver_log.read_text().split("lost:", 1)[1]
        assert driver.process.wait(30) == 0  # stops and leaves Ray promptly, though its node is gone
        assert "stopped" in driver_log.read_text()
    finally:
        if driver is not None:
            driver.stop()
        head.stop()
        shutil.rmtree(ray_dir, ignore_errors=True)
