package bench

import (
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Table is a plain-text table whose columns are padded to line up: the
// leading label columns are left-aligned, the others (figures)
// right-aligned. Separator rows are drawn as dashes across the whole width.
type Table struct {
	header []string
	labels int
	rows   [][]string // nil marks a separator
}

// NewTable returns a table with the given column headers whose first
// column is a label.
func NewTable(header ...string) *Table {
	return &Table{header: header, labels: 1}
}

// Labels sets how many leading columns are left-aligned labels (default 1).
func (t *Table) Labels(n int) *Table {
	t.labels = n
	return t
}

// Row appends a row; missing cells are blank, extra cells are kept.
func (t *Table) Row(cells ...string) {
	t.rows = append(t.rows, cells)
}

// Separator appends a horizontal rule.
func (t *Table) Separator() {
	t.rows = append(t.rows, nil)
}

// WriteTo writes the table to w, one line per row.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	ncol := len(t.header)
	for _, r := range t.rows {
		ncol = max(ncol, len(r))
	}
	width := make([]int, ncol)
	measure := func(r []string) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	measure(t.header)
	for _, r := range t.rows {
		measure(r)
	}
	total := 0
	for _, wd := range width {
		total += wd
	}
	total += 2 * (ncol - 1)

	var b strings.Builder
	line := func(r []string) {
		var cells []string
		for i := 0; i < ncol; i++ {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i < t.labels {
				cells = append(cells, c+pad)
			} else {
				cells = append(cells, pad+c)
			}
		}
		b.WriteString(strings.TrimRight(strings.Join(cells, "  "), " "))
		b.WriteByte('\n')
	}
	line(t.header)
	b.WriteString(strings.Repeat("-", total) + "\n")
	for _, r := range t.rows {
		if r == nil {
			b.WriteString(strings.Repeat("-", total) + "\n")
			continue
		}
		line(r)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// String returns the table as text.
func (t *Table) String() string {
	var b strings.Builder
	t.WriteTo(&b)
	return b.String()
}

func formatFloat(x float64, decimals int) string {
	return strconv.FormatFloat(x, 'f', decimals, 64)
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// JoinRates formats per-run figures as "352 / 360 / 349".
func JoinRates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = FormatRate(x)
	}
	return strings.Join(parts, " / ")
}
