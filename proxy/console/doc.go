// Package console is the web console: one page under Prefix (/prestroid/)
// on the proxy's admin surface and the JSON endpoints it reads. It holds
// the ring of recent placed queries the proxy feeds (ring.go), the page's
// files and the JSON views of the clusters and decisions (http.go), of the
// admission queue with its cancel button (queue.go), and of the
// estimator's figures and q-error (estimator.go).
//
// The page's files (HTML, script, style, the vendored chart library under
// vendor/) hold no data and are served to anyone who reaches the surface,
// since a browser cannot send a bearer header when it loads a page; the
// JSON and the cancel button need the admin token when one is configured,
// which the page asks for once and sends as X-Prestroid-Admin-Token on
// every fetch. The proxy checks that token: it calls Handler.ServePage
// first and Handler.ServeAPI only for an authorized request.
//
// The console reads the proxy through the Proxy interface (cluster states
// and drift counts as plain values), the admission store
// (admission.Store), and a func for the estimator's figures (estimate.Stats);
// it imports neither the proxy's core nor its routing, so a decision's
// kind arrives as its label.
package console
