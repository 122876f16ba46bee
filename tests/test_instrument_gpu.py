"""instrument/ on CUDA: backward ranges live on the autograd engine's device thread."""

from __future__ import annotations

import threading

import pytest
import torch

from instrument.ranges import naming
from instrument.ranges.session import annotate
from tests.test_instrument import VOCAB, Net
from tests.test_instrument_support import FailBackward, Recorder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_backward_ranges_are_pushed_and_popped_on_the_engine_thread():
    model = Net().cuda()
    rec = Recorder()
    ids = torch.randint(0, VOCAB, (2, 5), device="cuda")
    with annotate(model, emit=rec):
        model(ids, labels=ids).backward()
    assert rec.violations == [] and rec.open_ranges() == []
    ranges = rec.ranges()
    here = threading.get_ident()
    fwd_threads = {r.thread for r in ranges if r.name.startswith("nsysmap:fwd:")}
    bwd_threads = {r.thread for r in ranges if r.name.startswith("nsysmap:bwd:")}
    assert fwd_threads == {here}
    assert len(bwd_threads) == 1 and here not in bwd_threads
    phase = next(r for r in ranges if r.name == naming.phase_range("backward"))
    assert phase.thread == here


def test_exception_in_cuda_backward_closes_engine_thread_ranges_on_that_thread():
    class Fails(torch.nn.Module):
        def forward(self, x):
            return FailBackward.apply(x)

    model = Net().cuda()
    model.blocks[0].act = Fails()
    rec = Recorder()
    ids = torch.randint(0, VOCAB, (2, 5), device="cuda")
    with annotate(model, emit=rec):
        with pytest.raises(RuntimeError, match="backward failed"):
            model(ids).sum().backward()
        # Closed by a one-node backward run on the device thread (a wrong-thread pop
        # would show up as a violation).
        assert rec.open_ranges() == [naming.step_range(0)]
    assert rec.violations == [] and rec.open_ranges() == []
