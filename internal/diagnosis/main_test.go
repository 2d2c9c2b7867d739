package diagnosis

import (
	"testing"

	"go.uber.org/goleak"
)

// Tracker.Run starts a verdict goroutine: it must stop with Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
