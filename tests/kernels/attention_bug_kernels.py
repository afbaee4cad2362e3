"""The attention kernels of ``warpspec.ops.attention_kernel``, ``warpspec.ops.attention_decode_kernel``,
``warpspec.ops.attention_backward_kernel`` and ``warpspec.ops.attention_paged_kernel`` with one bug planted per
class, for tests/ops/test_attention.py, tests/ops/test_attention_decode.py, tests/ops/test_attention_backward.py,
tests/ops/test_attention_varlen_paged.py and tests/ops/test_attention_paged_decode.py.

Each class overrides the one helper of ``Attention``, ``Decode``, ``DecodePaged``, ``BackwardKV``, ``BackwardKVDQ``,
``BackwardFused`` or ``AttentionPaged`` that it breaks. A line that an error report must name ends
with a marker comment ``# <<< name``; ``marker_line(name)`` finds its number.
"""

from tests.support.markers import markers_of

from warpspec.ops.attention_backward_kernel import BackwardFused, BackwardKV, BackwardKVDQ
from warpspec.ops.attention_decode_kernel import DECODE_ROWS, Decode, DecodePaged
from warpspec.ops.attention_kernel import Attention
from warpspec.ops.attention_paged_kernel import AttentionPaged

marker_line = markers_of(__file__)


class ReleasesVBeforePV(Attention):
    """The V stage goes back to the producer before the PV WGMMA that reads it has completed: the producer's next
    TMA load may overwrite the tile under the tensor cores."""

    def retire_pv(self, pipe_v):
        pipe_v.consumer_release()
        pipe_v.consumer_advance()
        self.wgmma.wait_group(0)  # <<< late-wait


class IssuesOutOfTurn(Attention):
    """The warpgroups never wait for their turn, while still handing the turn over: the ping-pong barrier gets
    arrivals for phases nobody waits for."""

    def wait_turn(self, turn, phase):
        pass


class ReadsPartialBeforeItsFlag(Decode):
    """The last split loads the first split's partial before waiting for the pack's count: the load may read the
    slot before (or while) the other block writes it."""

    def wait_for_partials(self, ws_lse, flags, pb, n_splits):
        self.load_global(ws_lse, offsets=[0, pb * n_splits], shape=[DECODE_ROWS, 1])  # <<< early-read
        with self.single_thread():
            self.flag.wait(flags, pb, n_splits - 1)
            self.flag.signal(flags, pb, 0)
        self.sync()


class ReleasesQBeforeDK(BackwardKV):
    """The previous tile's (Q, dO) stage goes back to the producer before the dK WGMMA that reads its Q has
    completed: the next TMA load may overwrite Q under the tensor cores."""

    def retire_previous(self, pipe, held, pending):
        self.mbarrier.arrive(pipe.empty_barriers[held])
        self.wgmma.wait_group(pending)  # <<< late-dk-wait


class ReadsTheNextPage(AttentionPaged):
    """Key tile j looks its page up one block-table entry too far: a sequence that fills its table reads past the
    table's row."""

    def key_tile_offsets(self, k_row, kv_bh, j):
        table, sequence, _, _ = k_row
        first = j * self.block_n
        page = self.load_scalar(table, [sequence, first // self.page_size + 1])  # <<< next-page
        return [page, first % self.page_size, kv_bh * self.head_dim]


class ReadsTheNextPageInDecode(DecodePaged):
    """The paged decode kernel looks each key tile's page up one block-table entry too far: a sequence that fills
    its table reads past the table's row."""

    def key_offsets(self, pages, kv_bh, key):
        table, sequence, kv_heads, _, _ = pages
        page = self.load_scalar(table, [sequence, key // self.page_size + 1])  # <<< decode-next-page
        return [kv_bh % kv_heads, page * self.page_size + key % self.page_size, 0]


class AnnouncesOnePageOfFour(DecodePaged):
    """The paged decode producer announces the bytes of a tile's first page alone, though it loads four: the full
    barrier's transaction count goes below zero when the second page lands."""

    def load_tile(self, pipe, gk, gv, sk, sv, places):
        with self.single_thread():
            stage = pipe.producer_stage
            self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sk[stage][0].nbytes + sv[stage][0].nbytes)
            for part in range(self.block_n // self.sub_n):
                self.tma.global_to_shared(src=gk, dst=sk[stage][part], offsets=places[part],  # <<< one-page-of-four
                                          mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gv, dst=sv[stage][part], offsets=places[part],
                                          mbarrier=pipe.producer_barrier())


class ReadsAPageBeforeItLands(AttentionPaged):
    """The producer arrives on a stage's full barrier without announcing the bytes its TMA load of the page will
    deliver: the barrier completes on the arrival alone, and the consumer may read the stage before the page
    lands."""

    def load_stage(self, pipe, gx, sx, offsets):
        with self.single_thread():
            self.mbarrier.arrive(pipe.producer_barrier())  # <<< no-expect-tx
            self.tma.global_to_shared(src=gx, dst=sx[pipe.producer_stage], offsets=offsets,
                                      mbarrier=pipe.producer_barrier())


class OverwritesDQStaging(BackwardKVDQ):
    """The warpgroup stores its dQ half into the staging tile without waiting for the previous tile's reduce-add
    (still reading that tile) first."""

    def reduce_dq(self, dq, wg, acc_dq, bh, offset_m):
        self.store_shared(dq.staging[wg][0], acc_dq)  # <<< early-staging
        self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=dq.staging[wg], dst=dq.view, offsets=[bh, offset_m, wg * dq.half],
                                      reduce="add")
            self.tma.commit_group()


class StoresGradientsOverTheRingEarly(BackwardFused):
    """A warpgroup writes its finished gradient into the (Q, dO) ring for its TMA stores without waiting until the
    other warpgroup's last GEMMs, which may still read that stage, are done."""

    def store_keys_major(self, tiles, ring, view, grad, kv_bh, n_items):
        self.ring_stores(tiles, ring, view, grad, kv_bh)  # <<< early-ring


class StoresPBeforeItIsRead(BackwardFused):
    """A warpgroup stores a tile's P over the shared buffer without waiting until both warpgroups' dV WGMMAs of the
    previous tile have read it."""

    def fused_store_p(self, tiles, p, item):
        p16 = self.cast(p, self.dtype)
        for h in range(2):
            self.store_shared(tiles.probs[h][tiles.wg], p16, column=64 * h)  # <<< early-p
        self.fence_proxy_async()
        self.mbarrier.arrive(tiles.p_written)


class IssuesDVBeforeBothPs(BackwardFused):
    """A warpgroup issues its dV WGMMA, which reads both warpgroups' P, without waiting until the other warpgroup
    has stored its half."""

    def fused_dv(self, tiles, item, stage, acc_dv):
        self.wgmma.fence()
        for j in range(2):
            self.wgmma.mma(tiles.probs[tiles.wg][j].transpose(), tiles.sdo[stage][j][0], acc_dv)  # <<< early-dv
        self.wgmma.commit_group()
