package cuda

import "sync"

// Word returns the address of a 32-bit word of device memory, zero, that
// stays allocated as long as the device is open (it is not counted by
// Usage, and Free does not take it). It is for the words that streams wait
// for (Stream.WaitValue32): a stream may reach such a wait long after its
// owner has gone, so the word must not be freed and reused under it. Words
// are not reused; they come from pages of wordPage bytes, zeroed when
// allocated, freed by Device.Close.
func (d *Device) Word() (DevicePtr, error) {
	return d.words.next(d)
}

// wordPage is the size of an allocation that Word carves words from.
const wordPage = 4096

// words are the pages of Word.
type words struct {
	mu    sync.Mutex
	pages []DevicePtr
	used  int // bytes of the last page handed out
}

func (w *words) next(d *Device) (DevicePtr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pages) == 0 || w.used == wordPage {
		var p DevicePtr
		err := d.Do(func() error {
			var r Result
			if p, r = cuMemAlloc(wordPage); r != Success {
				return check("cuMemAlloc", r)
			}
			// zero before any stream can wait on it; the default (legacy)
			// stream, synchronized at once: once per page
			if err := check("cuMemsetD32Async", cuMemsetD32Async(p, 0, wordPage/4, 0)); err != nil {
				cuMemFree(p)
				return err
			}
			if err := check("cuStreamSynchronize", cuStreamSynchronize(0)); err != nil {
				cuMemFree(p)
				return err
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		w.pages, w.used = append(w.pages, p), 0
	}
	p := w.pages[len(w.pages)-1].Add(w.used)
	w.used += 4
	return p, nil
}

// free releases the pages; it runs on the worker as it stops.
func (w *words) free() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pages {
		cuMemFree(p)
	}
	w.pages, w.used = nil, 0
}
