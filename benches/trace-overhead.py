"""The cost of trace export to a plugin call: host-local ADD run as a
process, without and with an exporter, against a live, dead, black-hole and
10 MB-reply collector (testkit/otlp_receiver.py). As root, after
`cargo build -p cni-plugins --bin host-local`:

    python3 benches/trace-overhead.py [RUNS]

Figures: docs/observability.md ("The export budget").
"""
import json, os, shutil, subprocess, sys, tempfile, time, statistics, socket

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HL = os.path.join(TARGET, "debug", "host-local")
RX = os.path.join(ROOT, "testkit", "otlp_receiver.py")
NETNS = f"trbench-{os.getpid()}"

OUT = tempfile.mkdtemp()


def start(mode):
    out = os.path.join(OUT, mode)
    p = subprocess.Popen(['python3', RX, '--out', out, '--mode', mode], stdout=subprocess.PIPE)
    port = int(p.stdout.readline())
    return p, port

def run(n, extra_env, tag):
    d = tempfile.mkdtemp()
    conf = json.dumps({"cniVersion": "1.0.0", "name": "bench", "type": "host-local",
                       "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.200.0.0/16"}]], "dataDir": d}}).encode()
    times = []
    for i in range(n):
        env = {"PATH": os.environ["PATH"], "CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"c{i}", "CNI_NETNS": f"/run/netns/{NETNS}",
               "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
        env.update(extra_env)
        t = time.perf_counter()
        r = subprocess.run([HL], input=conf, env=env, capture_output=True)
        times.append((time.perf_counter() - t) * 1000)
        assert r.returncode == 0, r.stdout
    shutil.rmtree(d)
    times.sort()
    print(f"{tag:40s} p50 {statistics.median(times):7.2f} ms  p90 {times[int(len(times)*0.9)]:7.2f} ms  max {times[-1]:7.2f} ms")

subprocess.run(["ip", "netns", "add", NETNS], check=True)
TP = {"TRACEPARENT": "00-5b8efff798038103d269b633813fc60c-eee19b7ec3c1b174-01"}
n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
run(n, {}, "no exporter")
run(n, TP, "TRACEPARENT, no exporter")
p, port = start('normal')
run(n, {**TP, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}, "exporting to a local receiver")
p.kill()
s = socket.socket(); s.bind(('127.0.0.1', 0)); dead = s.getsockname()[1]; s.close()
run(n, {**TP, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{dead}"}, "dead endpoint (refused)")
p, port = start('blackhole')
run(max(n // 4, 5), {**TP, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}, "black hole (default 250 ms budget)")
p.kill()
p, port = start('big')
run(n, {**TP, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}, "10 MB reply")
p.kill()
subprocess.run(["ip", "netns", "del", NETNS], check=True)
shutil.rmtree(OUT)
