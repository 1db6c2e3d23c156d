"""No span is lost when a short process closes the manager and shuts the
provider down while the span thread holds a batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

SCRIPT = """
import sys, tempfile, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from hrm_memory import MemoryManager

class Count(SpanExporter):
    n = 0
    def export(self, spans):
        Count.n += len(spans)
        return SpanExportResult.SUCCESS

lost = []
for _ in range(3):
    Count.n = 0
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Count()))
    with tempfile.TemporaryDirectory() as root:
        mm = MemoryManager(root, durability="flush", tracer_provider=provider)
        for i in range(2000):
            mm.write("altitude.patterns", f"k{i}", i)
        time.sleep(0.1)  # the span thread starts on its batch
        mm.close()
        provider.shutdown()
    lost.append(2000 - Count.n)
print(lost)
"""


def test_close_then_shutdown_delivers_every_span() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[0, 0, 0]", out.stdout + out.stderr
