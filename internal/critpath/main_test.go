package critpath

import (
	"testing"

	"go.uber.org/goleak"
)

// Decode inflates in a goroutine: every path out of it must stop that.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
