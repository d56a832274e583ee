"""agentx's memory over a long session-tree replay: VmRSS every few seconds, its least-squares slope
after the warm-up, and a plot.

The run is bench/profile_trees.py's (the with-subagents synthetic corpus cut to 12 turns, `run --scenario
agentx` against the built-in simulator, the simulator on CPU 0 and the client on CPU 1) at one level for
--duration seconds; this script samples the client's VmRSS and anonymous RSS from /proc while it runs,
fits the slope over the samples from --settle seconds after the first request on, and writes OUT/rss.json
and OUT/rss.svg (the samples, the fitted line):

    python3 bench/rss_over_time.py --agentx target/release/agentx-host --lanes 256 --duration 1200

Nothing is asserted: the figures are for the performance guide. A client that fails prints why, and the
JSON keeps what was sampled.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import time


def agentx_pid(out: pathlib.Path) -> int | None:
    """The `agentx-host run` process writing under OUT."""
    found = subprocess.run(["pgrep", "-f", f"agentx-host run .*{out}"], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    return pids[0] if pids else None


def rss_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, RssAnon) in KiB, or None once the process is gone."""
    try:
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    except OSError:
        return None
    def kib(name: str) -> int:
        return int(fields.get(name, "0 kB").split()[0])
    return kib("VmRSS"), kib("RssAnon")


def slope_per_minute(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB), in MiB per minute."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (m - mean_m) for t, m in points)
    return cov / var * 60


def svg(samples: list[dict], fit: dict | None, title: str) -> str:
    """The samples (VmRSS and anonymous RSS over minutes) and the fitted line, as an SVG."""
    width, height, pad = 720, 360, 50
    t_max = max(s["t_s"] for s in samples) or 1
    m_max = max(s["rss_mib"] for s in samples) * 1.1 or 1
    def x(t: float) -> float:
        return pad + (width - 2 * pad) * t / t_max
    def y(m: float) -> float:
        return height - pad - (height - 2 * pad) * m / m_max
    def line(key: str, colour: str) -> str:
        points = " ".join(f"{x(s['t_s']):.1f},{y(s[key]):.1f}" for s in samples)
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f'<text x="{pad}" y="20">{title}</text>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
        line("rss_mib", "#1f77b4"),
        line("anon_mib", "#ff7f0e"),
    ]
    for minute in range(0, int(t_max // 60) + 1, max(1, int(t_max // 600))):
        parts.append(f'<text x="{x(minute * 60):.1f}" y="{height - pad + 16}" text-anchor="middle">{minute}</text>')
    for tick in range(0, int(m_max) + 1, max(50, int(m_max // 5) // 50 * 50)):
        parts.append(f'<text x="{pad - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">minutes since the client started</text>')
    parts.append(f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">MiB</text>')
    if fit:
        t0, t1 = fit["from_s"], t_max
        m0 = fit["intercept_mib"] + fit["slope_mib_per_min"] * t0 / 60
        m1 = fit["intercept_mib"] + fit["slope_mib_per_min"] * t1 / 60
        parts.append(f'<line x1="{x(t0):.1f}" y1="{y(m0):.1f}" x2="{x(t1):.1f}" y2="{y(m1):.1f}" stroke="#d62728" stroke-dasharray="6 4"/>')
    parts.append(f'<text x="{width - pad}" y="{pad - 8}" text-anchor="end" fill="#1f77b4">VmRSS</text>')
    parts.append(f'<text x="{width - pad}" y="{pad + 8}" text-anchor="end" fill="#ff7f0e">anonymous</text>')
    parts.append(f'<text x="{width - pad}" y="{pad + 24}" text-anchor="end" fill="#d62728">fit after warm-up</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agentx", required=True)
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/agentx-rss"))
    p.add_argument("--lanes", type=int, default=256)
    p.add_argument("--duration", type=float, default=1200, help="benchmark duration, s")
    p.add_argument("--every", type=float, default=5, help="sampling period, s")
    p.add_argument("--settle", type=float, default=180, help="seconds after the start left out of the fit")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    bench = pathlib.Path(__file__).parent / "profile_trees.py"
    cmd = [sys.executable, str(bench), "--agentx", a.agentx, "--levels", str(a.lanes),
           "--duration", str(a.duration), "--out", str(a.out)]
    log = open(a.out / "rss-run.log", "w")
    runner = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    samples: list[dict] = []
    pid, started = None, None
    while runner.poll() is None:
        pid = pid or agentx_pid(a.out)
        reading = rss_kib(pid) if pid else None
        if reading is None:
            pid = None
        else:
            started = started or time.monotonic()
            samples.append({"t_s": round(time.monotonic() - started, 1),
                            "rss_mib": round(reading[0] / 1024, 1), "anon_mib": round(reading[1] / 1024, 1)})
        time.sleep(a.every)
    # The run's end (grace, exports, the cache-truth report) is not the replay: fit over the
    # samples from the settle time to the benchmark duration (the warmup before profiling makes
    # that end a little early, never late).
    end_s = a.duration
    fitted = [(s["t_s"], s["rss_mib"]) for s in samples if a.settle <= s["t_s"] <= end_s]
    slope = slope_per_minute(fitted)
    fit = None
    if slope is not None:
        mean_t = sum(t for t, _ in fitted) / len(fitted)
        mean_m = sum(m for _, m in fitted) / len(fitted)
        fit = {"from_s": a.settle, "to_s": end_s, "slope_mib_per_min": round(slope, 3),
               "intercept_mib": round(mean_m - slope / 60 * mean_t, 1), "samples": len(fitted)}
    result = {"lanes": a.lanes, "duration_s": a.duration, "runner_exit": runner.returncode,
              "peak_rss_mib": max((s["rss_mib"] for s in samples), default=None), "fit": fit, "samples": samples}
    if not samples:
        result["why_not"] = f"no agentx-host process was seen; see {log.name}"
    (a.out / "rss.json").write_text(json.dumps(result, indent=1) + "\n")
    if samples:
        title = f"agentx session-tree replay, {a.lanes} lanes: RSS over the run"
        (a.out / "rss.svg").write_text(svg(samples, fit, title))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))


if __name__ == "__main__":
    main()
