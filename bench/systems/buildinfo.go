package systems

import (
	"runtime/debug"
	"sync"
)

var buildDeps = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return m
	}
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil {
			v = d.Replace.Path
			if d.Replace.Version != "" {
				v += "@" + d.Replace.Version
			}
		}
		m[d.Path] = v
	}
	return m
})
