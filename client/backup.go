package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/okiba/okiba/api"
)

// Backup streams a backup of the broker into w (the admin permission): every queue,
// message, topic record and principal, and the data directory's secret, at one moment;
// `okiba restore` makes a data directory of it. It returns the bytes written. Always
// over plain HTTP, never the stream, whose answers are held whole in memory; never
// retried by the client. A backup cut short (the connection broke, the server failed a
// read) lacks its end frame: a restore refuses it, and the error here says the copy is
// incomplete.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server()+api.BackupPath, nil)
	if err != nil {
		return 0, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e, _ := answerError(resp.StatusCode, data)
		return 0, e
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("okiba: the backup was cut short after %d bytes: %w", n, err)
	}
	return n, nil
}
