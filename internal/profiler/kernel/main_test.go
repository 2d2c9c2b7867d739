package kernel

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/rootline/rootline/internal/kclock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction(kclock.Refresher)) }
