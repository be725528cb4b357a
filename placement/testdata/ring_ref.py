# Oracle for TestRingMD5MatchesReference: article 000's reference ring,
# written out independently. Prints "key<TAB>owner" for each key given on
# standard input, on a ring of the nodes in argv[2:] with argv[1] virtual
# nodes each.
import bisect
import hashlib
import sys


def h32(s):
    return int.from_bytes(hashlib.md5(s.encode()).digest()[:4], "big")


vnodes = int(sys.argv[1])
points = sorted((h32("%s#%d" % (n, i)), n) for n in sys.argv[2:] for i in range(vnodes))
hashes = [p[0] for p in points]
for line in sys.stdin:
    key = line.rstrip("\n")
    i = bisect.bisect_right(hashes, h32(key)) % len(points)
    print("%s\t%s" % (key, points[i][1]))
