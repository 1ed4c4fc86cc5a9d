package verify

import (
	"cmp"
	"fmt"

	"github.com/syncer-dev/syncer/internal/formats/custom"
)

// NewReader returns the reader of a destination of format, sending with
// client: through its verify block when it has one, whatever the format;
// else the syncer format's /v1/lookup or Elasticsearch's _mget. A format
// without a read API (custom, standard-webhooks, cloudevents) and no block
// is an error wrapping ErrNoReadAPI; source is the programs' "source".
func NewReader(format string, block *custom.VerifyConfig, client Sender, source string) (Reader, error) {
	if block != nil {
		v, err := custom.NewVerify(block)
		if err != nil {
			return nil, err
		}
		return &CustomReader{Client: client, Verify: v, Source: source}, nil
	}
	switch format {
	case "", "syncer":
		return &SyncerReader{Client: client}, nil
	case "elasticsearch":
		return &ElasticsearchReader{Client: client}, nil
	}
	return nil, fmt.Errorf("format %s %w: verify cannot read it back without a verify block", cmp.Or(format, "syncer"), ErrNoReadAPI)
}
