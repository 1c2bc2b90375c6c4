"""A worker's preload asks the object store, once, whether it refuses a second ``If-None-Match: *`` write, so
that every work-horse forked from it stores its clip without asking again (jobs/worker.py preload)."""

from __future__ import annotations

import json
import subprocess
import sys

from testkit.faces import user_env

FORKED = """
import json, os
from quoteclip.settings import Settings
from jobs.worker import preload
from storage import open_storage
settings = Settings.from_env()
preload(settings)
pid = os.fork()
if pid == 0:  # as rq forks a work-horse for a job
    store, sent = open_storage(settings), []
    store.client.meta.events.register("before-send", lambda request, **_: sent.append(request.method))
    print(json.dumps({"refuses": store.conditional_writes(), "requests": sent}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_work_horse_inherits_the_stores_answer_from_its_worker(s3, tmp_path) -> None:
    env = user_env({**s3.env(), "QUOTECLIP_CACHE_DIR": str(tmp_path / "cache")}, drop=("QUOTECLIP_", "AWS_"))
    done = subprocess.run([sys.executable, "-c", FORKED], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr
    horse = json.loads(done.stdout.strip().splitlines()[-1])
    assert horse == {"refuses": True, "requests": []}, horse  # SeaweedFS refuses it; the horse asked nothing
    assert "Contents" not in s3.client().list_objects_v2(Bucket=s3.bucket)  # the probe's marker is gone
