package server

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/floodgate-go/floodgate/envoy"
)

// watchDebounce is how long the watcher waits after the last file event
// before it reloads, so that an editor's write-rename-chmod sequence or a
// ConfigMap's symlink swap reloads once.
const watchDebounce = 100 * time.Millisecond

// watchQuiet is how long the configuration file and the Envoy directory's
// files must have gone unmodified (by their modification times) before the
// watcher reads them, so that a file written in place in several steps is
// read once it is whole rather than half way.
const watchQuiet = 500 * time.Millisecond

// watcher reloads a server's configuration when its file changes. It
// watches the file and its directory: the directory catches editors that
// replace the file by renaming and Kubernetes ConfigMap updates (which swap a
// "..data" symlink); the file catches writes through a symlink whose target
// lives elsewhere. A reload happens when the file's content changed, when
// the last reload failed (so that restoring the file clears the failure), and
// when the file disappears (which fails, and so is logged and reported).
type watcher struct {
	s        *Server
	w        *fsnotify.Watcher
	path     string // "" when only the Envoy directory is watched
	envoyDir string
	last     []byte // sha256 of the content last loaded (or rejected); nil: none
	failedOn []byte // sha256 of the content the watcher's last reload failed on
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// watch starts watching s.ConfigPath.
func (s *Server) watch() error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	w := &watcher{s: s, w: fw, path: s.ConfigPath, envoyDir: s.EnvoyConfigDir, stop: make(chan struct{}), done: make(chan struct{})}
	w.last = w.sum()
	if w.path != "" {
		if err := fw.Add(filepath.Dir(w.path)); err != nil {
			fw.Close()
			return err
		}
		fw.Add(w.path) // best effort: the directory watch is the one relied on
	}
	if w.envoyDir != "" {
		if err := fw.Add(w.envoyDir); err != nil {
			fw.Close()
			return err
		}
	}
	s.watcher = w
	go w.run()
	return nil
}

// sum hashes what a reload would read.
func (w *watcher) sum() []byte {
	h := sha256.New()
	if w.path != "" {
		data, err := os.ReadFile(w.path)
		if err != nil {
			return nil
		}
		h.Write(data)
	}
	if w.envoyDir != "" {
		h.Write(envoyDirSum(w.envoyDir))
	}
	return h.Sum(nil)
}

func (w *watcher) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.stop:
			timer.Stop()
			return
		case _, ok := <-w.w.Events:
			if !ok {
				return
			}
			timer.Reset(watchDebounce)
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			w.s.Logger.Warn("config watcher", "err", err)
		case <-timer.C:
			if wait := w.settling(); wait > 0 {
				timer.Reset(wait)
				continue
			}
			// A file replaced by a rename is a new inode: watch it again.
			if w.path != "" {
				w.w.Add(w.path)
			}
			sum := w.sum()
			if bytes.Equal(sum, w.last) && (w.s.state.Load().err == nil || bytes.Equal(sum, w.failedOn)) {
				continue
			}
			w.last = sum
			if sum == nil {
				w.s.Logger.Warn("the configuration file is gone or unreadable", "file", w.path)
			} else {
				w.s.Logger.Info("configuration changed; reloading", "file", w.path, "envoy_dir", w.envoyDir)
			}
			w.failedOn = nil
			if w.s.Reload() != nil {
				w.failedOn = sum
			}
		}
	}
}

// settling returns how much longer to wait before the files a reload
// reads (the configuration file and every file of the Envoy directory)
// have been left alone for watchQuiet, or 0. A file written in place in
// steps less than watchQuiet apart is so read only whole.
func (w *watcher) settling() time.Duration {
	var newest time.Time
	note := func(path string) {
		if fi, err := os.Stat(path); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	if w.path != "" {
		note(w.path)
	}
	if w.envoyDir != "" {
		paths, _ := envoy.DirFiles(w.envoyDir)
		for _, p := range paths {
			note(p)
		}
	}
	if newest.IsZero() {
		return 0
	}
	age := time.Since(newest)
	if age < 0 || age >= watchQuiet {
		return 0 // a clock in the future (a network file system) waits no more
	}
	return watchQuiet - age
}

func (w *watcher) close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.w.Close()
	})
}
