package bearer

import "testing"

func TestCheck(t *testing.T) {
	tok := New("s3cret")
	for _, tc := range []struct {
		name, header string
		want         Result
	}{
		{"exact", "Bearer s3cret", OK},
		{"lower-case scheme", "bearer s3cret", OK},
		{"upper-case scheme", "BEARER s3cret", OK},
		{"extra blanks", "  Bearer   s3cret  ", OK},
		{"empty", "", Missing},
		{"basic", "Basic czNjcmV0", Missing},
		{"scheme only", "Bearer", Missing},
		{"scheme and blank", "Bearer  ", Missing},
		{"wrong", "Bearer s3cre", Invalid},
		{"longer", "Bearer s3cret2", Invalid},
		{"case of token matters", "Bearer S3CRET", Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tok.Check(tc.header); got != tc.want {
				t.Fatalf("Check(%q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
	if !tok.Required() {
		t.Fatal("a set token must be required")
	}
	none := New("")
	if none.Required() || none.Check("") != OK || none.Check("Bearer x") != OK {
		t.Fatal("the zero token must accept everything")
	}
}
