package checkpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPackRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		batches []Inflight
	}{
		{"none", nil},
		{"one", []Inflight{{Key: "syncer-ab", Salt: "", IDs: []int64{1, 2, 3, 10, 9}, Versions: []int64{1, 1, 7, 1, 1 << 40}}}},
		{"several", []Inflight{
			{Key: "k1", Salt: "replay-3", IDs: []int64{5}, Versions: []int64{2}},
			{Key: "k2", Salt: "live-1", IDs: []int64{1 << 62, 1}, Versions: []int64{1, 3}},
			{Key: "k3", Salt: "", IDs: []int64{}, Versions: []int64{}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decode(encode(tt.batches))
			require.NoError(t, err)
			require.Len(t, got, len(tt.batches))
			for i := range got {
				require.Equal(t, tt.batches[i].Key, got[i].Key)
				require.Equal(t, tt.batches[i].Salt, got[i].Salt)
				require.Equal(t, len(tt.batches[i].IDs), len(got[i].IDs))
				for j := range got[i].IDs {
					require.Equal(t, tt.batches[i].IDs[j], got[i].IDs[j])
					require.Equal(t, tt.batches[i].Versions[j], got[i].Versions[j])
				}
			}
		})
	}
}

func TestPackIsSmall(t *testing.T) {
	t.Parallel()
	b := Inflight{Key: "syncer-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"}
	for i := range 500 {
		b.IDs = append(b.IDs, int64(1_000_000+i))
		b.Versions = append(b.Versions, 1)
	}
	require.Less(t, len(encode([]Inflight{b, b, b})), 3*1200)
}

func FuzzDecodeNeverPanics(f *testing.F) {
	f.Add(encode([]Inflight{{Key: "k", IDs: []int64{1, 2}, Versions: []int64{1, 1}}}))
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decode(data)
	})
}
