// One complete agentdb turn from Go (pgx v5): begin_task -> invoke -> report -> finalize_reply.
// Run: go mod init turn && go get github.com/jackc/pgx/v5 && DATABASE_URL=postgresql://... go run turn.go
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
)

func main() {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)

	var task string
	// The trusted runtime opens the task: identity and login state come from here.
	must(db.QueryRow(ctx, "SELECT agentdb.begin_task($1, $2, $3, authenticated => true, lang => 'en', time_zone => 'Asia/Shanghai')",
		"alice", "go-demo", "remind me to buy vegetables").Scan(&task))

	args, _ := json.Marshal(map[string]string{"content": "buy vegetables", "remind_at": "2026-12-01 08:00+08"})
	var receipt map[string]any
	// The agent's write: proven in the database or not done at all.
	must(db.QueryRow(ctx, "SELECT agentdb.invoke($1, $2, $3::jsonb, call_id => $4)",
		task, "add_reminder", string(args), "go-1").Scan(&receipt))

	var report string
	// The report for the model's final wording; taking it closes the tools.
	must(db.QueryRow(ctx, "SELECT agentdb.report_text($1)", task).Scan(&report))

	modelText := "Sorry, I couldn't save that reminder."
	if receipt["outcome"] == "success" && receipt["verified"] == true {
		modelText = "I've set a reminder to buy vegetables at 8am."
	}
	var verdict map[string]any
	// Whatever the model says goes through the gate; the user reads verdict["text"].
	must(db.QueryRow(ctx, "SELECT agentdb.finalize_reply($1, $2)", task, modelText).Scan(&verdict))

	var status string
	must(db.QueryRow(ctx, "SELECT agentdb.finish_task($1)", task).Scan(&status))
	fmt.Println(verdict["verdict"], verdict["text"], status)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
