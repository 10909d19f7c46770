import re,sys,statistics as S
from collections import defaultdict
pat=[('ack_w',r'post-to-ACK mean us: write ([\d.]+)'),('ack_wi',r'write_imm ([\d.]+), read'),('serve',r'serve mean us ([\d.]+)'),
     ('cts>data',r'WRITE to WRITE_IMM post ([\d.]+)'),('data>cts',r'WRITE_IMM to WRITE post ([\d.]+)'),
     ('cqe_rcv',r'receive ([\d.]+), send'),('cqe_snd',r', send ([\d.]+)(;|$)'),('pollgap',r'between polls of a CQ ([\d.]+)'),('post',r'in ibv_post_send ([\d.]+)'),
     ('polls',r'poll_cq calls (\d+)')]
for fn in sys.argv[1:]:
    print('#',fn)
    cur=None; d=defaultdict(list)
    for line in open(fn):
        if line.startswith('=='):
            cur=re.search(r'rep(\d+)-(.*)\.log',line).group(2); continue
        if 'stats' not in line: continue
        g=[]
        for n,p in pat:
            m=re.search(p,line); g.append(float(m.group(1)) if m else float('nan'))
        d[cur].append(g)
    print('config'.ljust(14),' '.join(n.rjust(9) for n,_ in pat))
    for k,v in d.items():
        med=[S.median(x[i] for x in v) for i in range(len(pat))]
        print(k.ljust(14),' '.join(('%.2f'%x).rjust(9) for x in med), len(v))
