package sns

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/okiba/okiba/internal/errcode"
)

// apiError is an error answer: an SNS error of internal/errcode's catalogue and a
// message for the user.
type apiError struct {
	errcode.SNSError
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// newErr is an error of the SNS code code; a code missing from the catalogue is a bug.
func newErr(code, format string, args ...any) *apiError {
	k, ok := errcode.SNSErrorOf(code)
	if !ok {
		panic("sns: internal/errcode has no SNS error " + code)
	}
	return &apiError{SNSError: k, Message: fmt.Sprintf(format, args...)}
}

// invalid is SNS's InvalidParameter, worded as SNS words it: "Invalid parameter: <what>".
func invalid(format string, args ...any) *apiError {
	return newErr("InvalidParameter", "Invalid parameter: "+format, args...)
}

// errorOf maps a broker error to its SNS error through internal/errcode's table; an
// internal error is logged and its details kept from the client.
func (f *Front) errorOf(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	row := errcode.Of(err)
	if row.Internal() {
		f.opts.Logger.Error("sns: internal error", "error", err)
		return newErr("InternalError", "%s", errcode.InternalMessage)
	}
	return newErr(row.SNSCode(), "%s", err.Error())
}

func (e *apiError) fault() string {
	if e.Receiver {
		return "Receiver"
	}
	return "Sender"
}

// writeError answers e in SNS's XML error shape.
func (f *Front) writeError(w http.ResponseWriter, e *apiError, id string) {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0"?>` + "\n")
	b.WriteString(`<ErrorResponse xmlns="` + namespace + `"><Error><Type>` + e.fault() + "</Type><Code>")
	escape(&b, e.Code)
	b.WriteString("</Code><Message>")
	escape(&b, e.Message)
	b.WriteString("</Message></Error><RequestId>" + id + "</RequestId></ErrorResponse>")
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.Status)
	_, _ = w.Write(b.Bytes())
}
