package fakethirdparty

// byID is a map by idKey that keeps decimal ids apart from text keys. The
// fake looks up every item it accepts in two of these, and it runs on the
// machine of the client it measures: an int64 key hashes and compares
// cheaper than a struct holding a string, and its entries are smaller, so
// fewer of them miss the cache.
type byID[V any] struct {
	num  map[int64]V
	text map[string]V
}

func newByID[V any](n int) byID[V] {
	return byID[V]{num: make(map[int64]V, n), text: map[string]V{}}
}

func (m byID[V]) get(k idKey) (V, bool) {
	if k.text != "" {
		v, ok := m.text[k.text]
		return v, ok
	}
	v, ok := m.num[k.v]
	return v, ok
}

func (m byID[V]) set(k idKey, v V) {
	if k.text != "" {
		m.text[k.text] = v
		return
	}
	m.num[k.v] = v
}

// byPair is byID's counterpart for (id, version) pairs.
type byPair[V any] struct {
	num  map[[2]int64]V
	text map[textPair]V
}

type textPair struct {
	text    string
	version int64
}

func newByPair[V any](n int) byPair[V] {
	return byPair[V]{num: make(map[[2]int64]V, n), text: map[textPair]V{}}
}

func (m byPair[V]) get(p pair) (V, bool) {
	if p.id.text != "" {
		v, ok := m.text[textPair{p.id.text, p.version}]
		return v, ok
	}
	v, ok := m.num[[2]int64{p.id.v, p.version}]
	return v, ok
}

func (m byPair[V]) set(p pair, v V) {
	if p.id.text != "" {
		m.text[textPair{p.id.text, p.version}] = v
		return
	}
	m.num[[2]int64{p.id.v, p.version}] = v
}
