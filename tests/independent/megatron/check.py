# sanity validator of a capture: decode batches, check collective/p2p consistency
import sys, json, base64, numpy as np
from collections import defaultdict
dt = np.dtype([("kind","u1"),("op","u1"),("flags","<u2"),("rank","<i4"),("comm","<u8"),("seq","<u8"),("ts","<i8"),("te","<i8"),("bytes","<u8"),("crank","<i4"),("peer","<i4"),("nranks","<u4"),("aux","<u4")])
assert dt.itemsize == 64
recs=[]; topics=defaultdict(int)
for ln in open(sys.argv[1]):
    m=json.loads(ln); topics[m["topic"]]+=1
    if m["topic"]=="cw.calls.v1":
        b=base64.b64decode(m["value_b64"]); assert b[:4]==b"CWB1"
        a=np.frombuffer(b[16:],dtype=dt); assert len(a)==int.from_bytes(b[8:12],"little")
        assert all("%016x"%c==m["key"].split("/")[1] for c in a["comm"]); recs.append(a)
a=np.concatenate(recs); print(dict(topics), len(a))
c=a[(a["kind"]==1)&((a["flags"]&1)==1)]
coll=c[c["op"]<6]
inst=defaultdict(list)
for r in coll: inst[(int(r["comm"]),int(r["seq"]))].append(r)
bad=0; spread=[]
for k,v in inst.items():
    n=v[0]["nranks"]
    if len(v)==n:
        te=[x["te"] for x in v]; ts=[x["ts"] for x in v]
        spread.append((max(te)-min(te))/1e6)
        if len({x["op"] for x in v})>1: bad+=1
print("coll instances",len(inst),"op mismatch",bad,"end spread ms p50/p99/max",np.percentile(spread,[50,99,100]))
