import re, triton, os
from triton.backends.compiler import GPUTarget
PAT = ["barrier.cluster", "mapa", "shared::cluster", "%cluster_ctarank", "%cluster_nctarank", "%clusterid", "%cluster_ctaid",
       ".reqnctapercluster", ".explicitcluster", "multicast", "fence.proxy.async.shared::cluster", "fence.acq_rel.cluster", "st.async", "ld.shared::cluster", "red.async"]
def compile_and_report(name, kernel, signature, constexprs, options, gluon=False):
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as S
    else:
        from triton.compiler import ASTSource as S
    src = S(fn=kernel, signature=signature, constexprs=constexprs, attrs={})
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    except Exception as e:
        msg = str(e)
        c = e
        while c.__cause__ or c.__context__:
            c = c.__cause__ or c.__context__; msg += "\n  cause: " + str(c)
        print(f"=== {name}: FAILED: {msg[-2500:]}")
        return None
    ptx = k.asm["ptx"]; ttgir = k.asm["ttgir"]
    os.makedirs("out", exist_ok=True)
    open(f"out/{name}.ptx","w").write(ptx); open(f"out/{name}.ttgir","w").write(ttgir); open(f"out/{name}.llir","w").write(k.asm["llir"])
    md = k.metadata
    print(f"=== {name}: OK  num_ctas={md.num_ctas} cluster_dims={getattr(md,'cluster_dims',None)} shared={md.shared}")
    for l in ttgir.splitlines():
        if l.startswith("#") or "ttg.num-ctas" in l: print("  TTGIR:", l[:300])
    print("  PTX counts:", {p: ptx.count(p) for p in PAT if ptx.count(p)})
    return k
