//go:build !unix

package broker

import "errors"

func freeSpace(string) (int64, error) { return 0, errors.New("free space unknown on this platform") }
