package partpos

// Lag is the one definition of a consumer's lag, shared by the metrics of
// a running stage or sink and by `exactly status`: the records between
// the consumer's position and the partition's last stable offset (the
// read_committed end, KIP-98), counting transaction markers, which take
// offsets. A partition without a stored or committed position is read
// from its log start offset, so its lag is counted from there. Offsets
// are Kafka offsets; the result is never negative.
func Lag(lastStable, logStart, position int64, stored bool) int64 {
	from := logStart
	if stored {
		from = position
	}
	return max(lastStable-from, 0)
}
