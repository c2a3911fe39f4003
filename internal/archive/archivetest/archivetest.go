// Package archivetest makes hostile tar archives for tests: the sparse
// bombs and endless headers that warren's readers of tenants' archives
// must refuse or bound.
package archivetest

import "fmt"

// RawHeader is one ustar header block, checksummed.
func RawHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], "00000000000\x00")
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// Padded pads b with zeros to a whole number of tar blocks.
func Padded(b []byte) []byte {
	if n := len(b) % 512; n != 0 {
		b = append(b, make([]byte, 512-n)...)
	}
	return b
}

// PAXRecord is one PAX record, its length included.
func PAXRecord(k, v string) string {
	rec := " " + k + "=" + v + "\n"
	n := len(rec)
	for {
		s := fmt.Sprint(n) + rec
		if len(s) == n {
			return s
		}
		n = len(s)
	}
}

// SparseTar is a PAX archive (GNU sparse format 1.0) of one file that
// expands to realSize bytes from a few hundred bytes: one hole, and the
// last byte of data.
func SparseTar(realSize int64) []byte {
	recs := PAXRecord("GNU.sparse.major", "1") + PAXRecord("GNU.sparse.minor", "0") +
		PAXRecord("GNU.sparse.name", "big") + PAXRecord("GNU.sparse.realsize", fmt.Sprint(realSize))
	var out []byte
	out = append(out, RawHeader("PaxHeaders/big", 'x', int64(len(recs)))...)
	out = append(out, Padded([]byte(recs))...)
	data := Padded([]byte(fmt.Sprintf("1\n%d\n1\n", realSize-1)))
	data = append(data, 'x')
	out = append(out, RawHeader("GNUSparseFile.0/big", '0', int64(len(data)))...)
	out = append(out, Padded(data)...)
	return append(out, make([]byte, 1024)...)
}
