package logring

import (
	"strings"

	"go.uber.org/zap/zapcore"
)

// Core returns a zap core that writes into r every line at or above level.
// Tee it with the process's usual output (zapcore.NewTee) so that lines go
// to both.
func (r *Ring) Core(level zapcore.LevelEnabler) zapcore.Core {
	return &core{LevelEnabler: level, ring: r, enc: zapcore.NewJSONEncoder(fieldsEncoderConfig())}
}

// fieldsEncoderConfig makes a JSON encoder write the fields alone: the
// entry's own parts (time, level, name, message) are kept in Entry's
// fields, so their keys are left empty, which omits them.
func fieldsEncoderConfig() zapcore.EncoderConfig {
	return zapcore.EncoderConfig{
		StacktraceKey:  "stacktrace",
		EncodeTime:     zapcore.RFC3339NanoTimeEncoder,
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeLevel:    zapcore.LowercaseLevelEncoder,
	}
}

// core is the zapcore.Core of a Ring. Its encoder holds the fields added
// with With, already encoded, as zap's own cores do.
type core struct {
	zapcore.LevelEnabler
	ring *Ring
	enc  zapcore.Encoder
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	enc := c.enc.Clone()
	for i := range fields {
		fields[i].AddTo(enc)
	}
	return &core{LevelEnabler: c.LevelEnabler, ring: c.ring, enc: enc}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	// The caller is not part of the line: it costs an allocation per line
	// and the logger name already says which runnable spoke.
	e.Caller = zapcore.EntryCaller{}
	buf, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	defer buf.Free()
	b := buf.Bytes()
	b = b[:len(b)-len(zapcore.DefaultLineEnding)]
	entry := Entry{Time: e.Time, Level: e.Level, Logger: e.LoggerName, Message: e.Message}
	limit := c.ring.cfg.MaxLineBytes
	if len(entry.Message)+len(b) > limit {
		entry.Truncated = true
		entry.Message = cut(entry.Message, limit)
		entry.Fields = "{}"
	} else {
		entry.Fields = string(b)
	}
	c.ring.add(entry)
	return nil
}

// cut shortens s to at most n bytes without splitting a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// A rune cut in two becomes invalid bytes at the end; drop them.
	return strings.ToValidUTF8(s[:n], "")
}

// Sync has nothing to flush: the lines are in memory.
func (c *core) Sync() error { return nil }
