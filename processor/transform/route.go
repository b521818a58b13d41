package transform

import (
	"context"
	"fmt"
	"strings"
)

func init() { registerStep("route", compileRoute) }

// compileRoute: the first rule that matches sets the output topic.
func compileRoute(b *builder) runFunc {
	routes := b.st.Route
	type rule struct {
		when  *program // nil: matches every record
		topic string
	}
	var rules []rule
	for j, rt := range routes {
		ru := rule{topic: rt.Topic}
		if strings.TrimSpace(rt.When) != "" {
			ru.when = b.expr(fmt.Sprintf("route[%d].when", j), rt.When, boolType)
		}
		rules = append(rules, ru)
	}
	return func(ctx context.Context, r *Record) ([]Record, error) {
		for _, ru := range rules {
			match := ru.when == nil
			if !match {
				var err error
				if match, err = ru.when.bool(ctx, r); err != nil {
					return nil, fmt.Errorf("route to %s: %w", ru.topic, err)
				}
			}
			if match {
				r.Topic = ru.topic
				break
			}
		}
		return nil, nil
	}
}
