package kafkaconn

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultMetadataMinAge is franz-go's minimum time between metadata
// requests; a shorter max age lowers it too, as franz-go refuses a max
// age below the min age.
const defaultMetadataMinAge = 5 * time.Second

// MetadataOpts refreshes a client's topic metadata every maxAge (0 keeps
// franz-go's 5m). The refresh is
// how a group consumer learns of partitions added to its topic: the group
// rebalances once the leader's metadata shows them. Each refresh is one
// Metadata request per client, so a shorter age costs little.
func MetadataOpts(maxAge time.Duration) []kgo.Opt {
	if maxAge <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.MetadataMaxAge(maxAge), kgo.MetadataMinAge(min(maxAge, defaultMetadataMinAge))}
}
