package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// checkBoltFile reads the bbolt file at path (raft.db) the way bbolt
// reads it on open, without bbolt, and returns an error naming the damage
// when bbolt could not open it safely: a file cut short (bbolt maps it and
// the process dies of SIGBUS on the first page past its end), no valid meta
// page, or a page of the tree that is not a page (bbolt rebuilds its free
// list at open by walking the tree and panics, in a goroutine of its own,
// on the first one). A missing or empty file is not damage: the node is
// new, or the directory lost its log, which the identity checks catch.
//
// It checks structure only, not the values: bbolt keeps no checksum of
// them. The layout read here is bbolt's on-disk format (version 2): a
// 16-byte page header (id, flags, count, overflow) and two meta pages, the
// valid one with the higher transaction id being current; integers are
// little-endian, as bbolt writes them on the platforms fencegate builds for.
func checkBoltFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Size() == 0 {
		return nil
	}
	m, err := readBoltMeta(f, st.Size())
	if err != nil {
		return fmt.Errorf("%s is damaged: %w", path, err)
	}
	need := int64(m.pgid) * int64(m.pageSize)
	if st.Size() < need {
		return fmt.Errorf("%s is cut short: %d bytes, but its last transaction (%d) needs %d", path, st.Size(), m.txid, need)
	}
	w := boltWalker{f: f, m: m, seen: map[uint64]bool{}}
	if err := w.bucket(m.root, nil, 0); err != nil {
		return fmt.Errorf("%s is damaged: %w", path, err)
	}
	if m.freelist != boltNoFreelist {
		if m.freelist < 2 || m.freelist >= m.pgid {
			return fmt.Errorf("%s is damaged: free list page %d is outside pages 2..%d", path, m.freelist, m.pgid-1)
		}
	}
	return nil
}

// bbolt's on-disk constants.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltPageHeader = 16
	boltElement    = 16 // branch and leaf element headers
	boltMetaSize   = 64
	boltBranch     = 0x01
	boltLeaf       = 0x02
	boltBucketFlag = 0x01
	boltNoFreelist = ^uint64(0)
	boltMaxDepth   = 64
)

type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// readBoltMeta returns the meta page bbolt would use: of the two that
// validate (magic, version, checksum), the one with the higher txid.
func readBoltMeta(r io.ReaderAt, size int64) (boltMeta, error) {
	var metas []boltMeta
	var why []string
	pageSize := int64(os.Getpagesize())
	for i := range int64(2) {
		off := i * pageSize
		if i == 1 && len(metas) == 1 {
			off = int64(metas[0].pageSize) // the page size the first meta gives
		}
		buf := make([]byte, boltPageHeader+boltMetaSize)
		if off+int64(len(buf)) > size {
			why = append(why, fmt.Sprintf("meta page %d is past the end", i))
			continue
		}
		if _, err := r.ReadAt(buf, off); err != nil {
			return boltMeta{}, err
		}
		m, err := decodeBoltMeta(buf[boltPageHeader:])
		if err != nil {
			why = append(why, fmt.Sprintf("meta page %d: %v", i, err))
			continue
		}
		metas = append(metas, m)
	}
	switch {
	case len(metas) == 0:
		return boltMeta{}, fmt.Errorf("no valid meta page (%v)", why)
	case len(metas) == 2 && metas[1].txid > metas[0].txid:
		return metas[1], nil
	}
	return metas[0], nil
}

func decodeBoltMeta(b []byte) (boltMeta, error) {
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != boltMagic {
		return boltMeta{}, errors.New("not a bbolt meta page")
	}
	if v := le.Uint32(b[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("version %d, want %d", v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(b[:56])
	if h.Sum64() != le.Uint64(b[56:]) {
		return boltMeta{}, errors.New("checksum mismatch")
	}
	m := boltMeta{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), freelist: le.Uint64(b[32:]), pgid: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}
	if m.pageSize < 1024 || m.pageSize > 1<<16 || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d", m.pageSize)
	}
	if m.pgid < 2 {
		return boltMeta{}, fmt.Errorf("high water mark %d", m.pgid)
	}
	return m, nil
}

// boltWalker walks a bbolt tree from the root bucket as bbolt's check
// does: every page it reaches must lie below the high water mark, carry
// its own id, be a branch or a leaf, hold its elements within its bytes,
// and be reached once.
type boltWalker struct {
	f    *os.File
	m    boltMeta
	seen map[uint64]bool
}

// bucket walks the bucket whose root page is root, or whose inline page
// is inline (root 0).
func (w *boltWalker) bucket(root uint64, inline []byte, depth int) error {
	if depth > boltMaxDepth {
		return errors.New("buckets nested too deep")
	}
	if root == 0 {
		if len(inline) < boltPageHeader {
			return errors.New("an inline bucket shorter than a page header")
		}
		return w.page(inline, 0, false, depth)
	}
	return w.node(root, depth)
}

// node reads page id and walks it.
func (w *boltWalker) node(id uint64, depth int) error {
	if depth > boltMaxDepth {
		return fmt.Errorf("page %d: the tree is deeper than %d", id, boltMaxDepth)
	}
	if id < 2 || id >= w.m.pgid {
		return fmt.Errorf("page %d is referenced but outside pages 2..%d", id, w.m.pgid-1)
	}
	ps := uint64(w.m.pageSize)
	hdr := make([]byte, boltPageHeader)
	if _, err := w.f.ReadAt(hdr, int64(id*ps)); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.LittleEndian
	if got := le.Uint64(hdr); got != id {
		return fmt.Errorf("page %d holds the header of page %d", id, got)
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= w.m.pgid {
		return fmt.Errorf("page %d with %d overflow pages runs past page %d", id, overflow, w.m.pgid-1)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return fmt.Errorf("page %d is referenced twice", i)
		}
		w.seen[i] = true
	}
	buf := make([]byte, (overflow+1)*ps)
	if _, err := w.f.ReadAt(buf, int64(id*ps)); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	return w.page(buf, id, true, depth)
}

// page checks the elements of one page (or inline bucket) and walks what
// they reference.
func (w *boltWalker) page(buf []byte, id uint64, onDisk bool, depth int) error {
	le := binary.LittleEndian
	flags := le.Uint16(buf[8:])
	count := int(le.Uint16(buf[10:]))
	if boltPageHeader+count*boltElement > len(buf) {
		return fmt.Errorf("page %d: %d elements do not fit in %d bytes", id, count, len(buf))
	}
	switch {
	case flags == boltBranch && onDisk:
		for i := range count {
			e := boltPageHeader + i*boltElement
			pos, ksize, child := int(le.Uint32(buf[e:])), int(le.Uint32(buf[e+4:])), le.Uint64(buf[e+8:])
			if e+pos+ksize > len(buf) || pos < 0 {
				return fmt.Errorf("page %d: key of element %d lies outside the page", id, i)
			}
			if err := w.node(child, depth+1); err != nil {
				return err
			}
		}
	case flags == boltLeaf:
		for i := range count {
			e := boltPageHeader + i*boltElement
			eflags, pos, ksize, vsize := le.Uint32(buf[e:]), int(le.Uint32(buf[e+4:])), int(le.Uint32(buf[e+8:])), int(le.Uint32(buf[e+12:]))
			end := e + pos + ksize + vsize
			if pos < 0 || ksize < 0 || vsize < 0 || end > len(buf) || end < e {
				return fmt.Errorf("page %d: key or value of element %d lies outside the page", id, i)
			}
			if eflags&boltBucketFlag == 0 {
				continue
			}
			v := buf[e+pos+ksize : end]
			if len(v) < 16 {
				return fmt.Errorf("page %d: bucket header of element %d is %d bytes", id, i, len(v))
			}
			if err := w.bucket(le.Uint64(v), v[16:], depth+1); err != nil {
				return err
			}
		}
	default:
		where := "page"
		if !onDisk {
			where = "inline bucket in page"
		}
		return fmt.Errorf("%s %d is neither a branch nor a leaf (flags %#x): it was overwritten or never written", where, id, flags)
	}
	return nil
}
