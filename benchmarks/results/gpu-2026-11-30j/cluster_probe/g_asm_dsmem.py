from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from common import compile_and_report
L1 = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[1]]))   # [256] split: 128 per CTA
@gluon.jit
def asm_dsmem_kernel(x_ptr, out_ptr):
    i = gl.arange(0, 256, layout=L1)
    x = gl.load(x_ptr + i)
    buf = gl.allocate_shared_memory(gl.float32, [256], gl.SwizzledSharedLayout(1, 1, 1, [0], cga_layout=[[1]]))  # reserves 512 B/CTA, only allocation -> offset 0
    # raw DSMEM via inline PTX: write own value to own smem slot (tid), cluster barrier, read peer CTA's slot.
    # NOTE: uses Triton's extern `global_smem` symbol directly -- no allocator coordination (fragile).
    y = gl.inline_asm_elementwise(
        """{
        .reg .u32 a, r, peer, ra; .reg .f32 v;
        mov.u32 a, global_smem; mov.u32 r, %tid.x; shl.b32 r, r, 2; add.u32 a, a, r;
        st.shared.f32 [a], $1;
        barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;
        mov.u32 peer, %cluster_ctarank; xor.b32 peer, peer, 1;
        mapa.shared::cluster.u32 ra, a, peer;
        ld.shared::cluster.f32 $0, [ra];
        barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;
        }""", "=f,f", [x], dtype=gl.float32, is_pure=False, pack=1)
    buf.store(x)
    gl.store(out_ptr + i, x + y)
compile_and_report("g_asm_dsmem", asm_dsmem_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {}, {"num_warps": 4, "num_ctas": 2}, gluon=True)
