package topic

// murmur2 is the 32-bit MurmurHash2 as Kafka's default partitioner computes it (seed
// 0x9747b28c, little-endian 4-byte blocks), so that a key lands on the partition a Kafka
// producer would choose for it. The function is part of every topic's format: a key's
// partition must never change, so this code must never change either.
func murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch n - i {
	case 3:
		h ^= uint32(data[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// KeyPartition returns the partition of a keyed record among n partitions: Kafka's
// toPositive(murmur2(key)) % n. An empty key is a key like any other.
func KeyPartition(key []byte, n int) int {
	return int(uint32(murmur2(key))&0x7fffffff) % n
}
