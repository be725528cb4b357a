/* Oracle for TestJumpHashMatchesPaper: the jump consistent hash exactly as
 * printed in Lamping & Veach (2014), figure 1. Reads "key buckets" pairs on
 * standard input (key as unsigned decimal) and prints one bucket a line. */
#include <stdint.h>
#include <stdio.h>

int32_t JumpConsistentHash(uint64_t key, int32_t num_buckets) {
	int64_t b = -1, j = 0;
	while (j < num_buckets) {
		b = j;
		key = key * 2862933555777941757ULL + 1;
		j = (b + 1) * (double(1LL << 31) / double((key >> 33) + 1));
	}
	return b;
}

int main(void) {
	unsigned long long key;
	int buckets;
	while (scanf("%llu %d", &key, &buckets) == 2) {
		printf("%d\n", JumpConsistentHash(key, buckets));
	}
	return 0;
}
