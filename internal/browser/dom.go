package browser

import (
	"encoding/json"
	"fmt"

	"github.com/chromedp/chromedp"

	"github.com/quorate/quorate/internal/await"
)

// attrResult is one attribute of the first element matching a selector.
type attrResult struct {
	Found  bool   `json:"found"`  // an element matches
	Exists bool   `json:"exists"` // it has the attribute
	Value  string `json:"value"`
}

// attr reads one attribute (or, with attr "", the text) of the first
// element that matches selector.
func (b *Browser) attr(selector, attr string) (attrResult, error) {
	expr := fmt.Sprintf(`(() => {
		const e = document.querySelector(%s);
		if (!e) return {found: false, exists: false, value: ""};
		const a = %s;
		if (a === "") return {found: true, exists: true, value: e.textContent};
		const v = e.getAttribute(a);
		return {found: true, exists: v !== null, value: v ?? ""};
	})()`, jsString(selector), jsString(attr))
	r, err := run(b, chromedp.Evaluate[attrResult](expr))
	if err == nil && !r.Found {
		err = fmt.Errorf("%w %s", errNotFound, selector)
	}
	return r, err
}

// Attr is the value of attribute attr of the first element matching the
// CSS selector, and whether it has it. It fails the test if no element
// matches.
func (b *Browser) Attr(selector, attr string) (string, bool) {
	b.t.Helper()
	r, err := b.attr(selector, attr)
	if err != nil {
		b.t.Fatalf("browser: attribute %s of %s: %v", attr, selector, err)
	}
	return r.Value, r.Exists
}

// Text is the text content of the first element matching the CSS
// selector. It fails the test if no element matches.
func (b *Browser) Text(selector string) string {
	b.t.Helper()
	r, err := b.attr(selector, "")
	if err != nil {
		b.t.Fatalf("browser: text of %s: %v", selector, err)
	}
	return r.Value
}

// Count is the number of elements matching the CSS selector.
func (b *Browser) Count(selector string) int {
	b.t.Helper()
	n, err := run(b, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(selector))))
	if err != nil {
		b.t.Fatalf("browser: count %s: %v", selector, err)
	}
	return n
}

// WaitAttr waits until the first element matching the CSS selector has
// attribute attr with a value pred accepts, and returns that value. It
// fails the test, naming the last value seen, if that takes longer than
// the timeout.
func (b *Browser) WaitAttr(selector, attr string, pred func(string) bool) string {
	b.t.Helper()
	return b.waitValue(fmt.Sprintf("attribute %s of %s", attr, selector), selector, attr, pred)
}

// WaitText is WaitAttr for the element's text content.
func (b *Browser) WaitText(selector string, pred func(string) bool) string {
	b.t.Helper()
	return b.waitValue("text of "+selector, selector, "", pred)
}

func (b *Browser) waitValue(what, selector, attr string, pred func(string) bool) string {
	b.t.Helper()
	var got string
	err := await.Wait(b.timeout(), func() error {
		r, err := b.attr(selector, attr)
		switch {
		case err != nil:
			return err
		case !r.Exists:
			return fmt.Errorf("%s: no such attribute", what)
		case !pred(r.Value):
			return fmt.Errorf("%s is %q", what, r.Value)
		}
		got = r.Value
		return nil
	})
	if err != nil {
		b.t.Fatalf("browser: waiting for %s: %v", what, err)
	}
	return got
}

// WaitCount waits until the number of elements matching the CSS selector
// satisfies pred, and returns it.
func (b *Browser) WaitCount(selector string, pred func(int) bool) int {
	b.t.Helper()
	var n int
	err := await.Wait(b.timeout(), func() error {
		var err error
		n, err = run(b, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(selector))))
		if err == nil && !pred(n) {
			err = fmt.Errorf("%d elements match %s", n, selector)
		}
		return err
	})
	if err != nil {
		b.t.Fatalf("browser: waiting for the count of %s: %v", selector, err)
	}
	return n
}

// Type focuses the first element matching the CSS selector and types text
// into it, as keystrokes.
func (b *Browser) Type(selector, text string) {
	b.t.Helper()
	if _, err := run(b, chromedp.SendKeys(chromedp.CSS(selector), text)); err != nil {
		b.t.Fatalf("browser: type into %s: %v", selector, err)
	}
}

// Click clicks the first element matching the CSS selector once it is
// visible. It does not wait for what the click causes: wait for that
// state next.
func (b *Browser) Click(selector string) {
	b.t.Helper()
	if _, err := run(b, chromedp.Click(chromedp.CSS(selector))); err != nil {
		b.t.Fatalf("browser: click %s: %v", selector, err)
	}
}

// Eval evaluates the JavaScript expression in the page and decodes its
// value, passed through JSON, into out (nil to drop it).
func (b *Browser) Eval(expr string, out any) {
	b.t.Helper()
	s, err := run(b, chromedp.Evaluate[string](fmt.Sprintf(`JSON.stringify((%s) ?? null)`, expr)))
	if err == nil && out != nil {
		err = json.Unmarshal([]byte(s), out)
	}
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
}
