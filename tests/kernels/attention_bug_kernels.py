"""The attention kernel of ``warpspec.ops.attention_kernel`` with one bug planted per class, for
tests/ops/test_attention.py.

Each class overrides the one helper of ``AttentionF16`` that it breaks. A line that an error report must name ends
with a marker comment ``# <<< name``; ``marker_line(name)`` finds its number.
"""

from tests.support.markers import markers_of

from warpspec.ops.attention_kernel import AttentionF16

marker_line = markers_of(__file__)


class ReleasesVBeforePV(AttentionF16):
    """The V stage goes back to the producer before the PV WGMMA that reads it has completed: the producer's next
    TMA load may overwrite the tile under the tensor cores."""

    def retire_pv(self, pipe_v):
        pipe_v.consumer_release()
        pipe_v.consumer_advance()
        self.wgmma.wait_group(0)  # <<< late-wait


class IssuesOutOfTurn(AttentionF16):
    """The warpgroups never wait for their turn, while still handing the turn over: the ping-pong barrier gets
    arrivals for phases nobody waits for."""

    def wait_turn(self, turn, phase):
        pass
