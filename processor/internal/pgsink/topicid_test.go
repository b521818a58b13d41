package pgsink

import "testing"

// decideStart applies the topic-identity policy to every kind of stored
// position.
func TestDecideStart(t *testing.T) {
	const id, other = "Ag4N7Vd1Q3W5p7Y5bqfQ1w==", "AQEBAQEBAQEBAQEBAQEBAQ=="
	tests := []struct {
		name          string
		row           StoredPosition
		ok            bool
		logStart, hwm int64
		want          startAt
	}{
		{"never stored", StoredPosition{}, false, 5, 10, startAt{offset: -1}},
		{"stored, same topic", StoredPosition{NextOffset: 7, TopicID: id}, true, 0, 10, startAt{offset: 7}},
		{"stored at the end", StoredPosition{NextOffset: 10, TopicID: id}, true, 0, 10, startAt{offset: 10}},
		{"stored without an ID, in range", StoredPosition{NextOffset: 7}, true, 0, 10, startAt{offset: 7}},
		{"recreated: another ID, offset in range", StoredPosition{NextOffset: 3, TopicID: other}, true, 0, 4, startAt{offset: -1, reason: ReasonRecreated}},
		{"recreated: another ID, offset above the end", StoredPosition{NextOffset: 3, TopicID: other}, true, 0, 1, startAt{offset: -1, reason: ReasonRecreated}},
		{"no ID and above the end: treated as recreated", StoredPosition{NextOffset: 3}, true, 0, 1, startAt{offset: -1, reason: ReasonRecreated}},
		{"same ID above the end: truncated, from the log start", StoredPosition{NextOffset: 12, TopicID: id}, true, 0, 10, startAt{offset: -1, reason: ReasonTruncated}},
		{"same ID far above the end, log start moved: from the log start", StoredPosition{NextOffset: 1000, TopicID: id}, true, 4, 8, startAt{offset: -1, reason: ReasonTruncated}},
		{"same ID one above the end", StoredPosition{NextOffset: 11, TopicID: id}, true, 0, 10, startAt{offset: -1, reason: ReasonTruncated}},
		{"below the log start: retention", StoredPosition{NextOffset: 2, TopicID: id}, true, 5, 10, startAt{offset: 5, reason: reasonRetention}},
		{"broker without topic IDs", StoredPosition{NextOffset: 7, TopicID: id}, true, 0, 10, startAt{offset: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broker := id
			if tt.name == "broker without topic IDs" {
				broker = ""
			}
			if got := decideStart(tt.row, tt.ok, broker, tt.logStart, tt.hwm); got != tt.want {
				t.Errorf("decideStart(%+v, %v, %d, %d) = %+v, want %+v", tt.row, tt.ok, tt.logStart, tt.hwm, got, tt.want)
			}
		})
	}
}
