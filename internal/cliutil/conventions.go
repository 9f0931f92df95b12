package cliutil

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Apply gives a command tree gpuplane's conventions, once for every
// command under root, so that no command has to remember them:
//
//   - every error of how a command was called is a UsageError carrying
//     the command's usage line: unknown flags (the flag error function),
//     a wrong number of arguments (each command's Args validator is
//     wrapped), an unknown sub-command (a command of sub-commands given an
//     argument that names none of them), an unknown help topic;
//   - a command of sub-commands run alone prints its help and succeeds;
//   - notes of deprecated flags go to stderr (cobra prints them where the
//     output goes, into -o json's output);
//   - cobra prints neither errors nor usage itself: Exit does.
//
// Call it after every sub-command is added and before Execute.
func Apply(root *cobra.Command) {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return FlagError(cmd, err) })
	if root.HasSubCommands() {
		root.InitDefaultHelpCmd()
		root.InitDefaultCompletionCmd()
	}
	Walk(root, func(c *cobra.Command) {
		c.Flags().SetOutput(stderrOf{c})
		switch {
		case c.Name() == "help" && c.Parent() == root:
			c.Args = helpTopic
		case c.HasSubCommands() && !c.Runnable():
			c.Args = subCommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		case c.Args != nil:
			c.Args = usageArgs(c.Args)
		case c.HasSubCommands():
			c.Args = subCommand
		default:
			c.Args = usageArgs(cobra.ArbitraryArgs)
		}
	})
}

// stderrOf writes to a command's stderr as it is when written to.
type stderrOf struct{ c *cobra.Command }

func (w stderrOf) Write(p []byte) (int, error) { return w.c.ErrOrStderr().Write(p) }

// Walk calls fn on root and every command under it, parents first.
func Walk(root *cobra.Command, fn func(*cobra.Command)) {
	fn(root)
	for _, c := range root.Commands() {
		Walk(c, fn)
	}
}

// usageArgs makes the errors of an Args validator usage errors. cobra's
// NoArgs calls an argument of a command without sub-commands an unknown
// command; it is said as what it is.
func usageArgs(validate cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		err := validate(cmd, args)
		if err == nil {
			return nil
		}
		if !cmd.HasSubCommands() && len(args) > 0 && strings.HasPrefix(err.Error(), "unknown command ") {
			err = fmt.Errorf("unexpected argument %q: %s takes none", args[0], cmd.CommandPath())
		}
		return FlagError(cmd, err)
	}
}

// subCommand refuses an argument to a command of sub-commands: it is an
// unknown sub-command (cobra has already matched the known ones).
func subCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(names) > 0 {
		msg += "; its commands: " + strings.Join(names, ", ")
	}
	return FlagError(cmd, fmt.Errorf("%s", msg))
}

// helpTopic refuses a help topic that names no command.
func helpTopic(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	c, rest, err := cmd.Root().Find(args)
	if err != nil || c == nil || len(rest) > 0 {
		return FlagError(cmd, fmt.Errorf("unknown help topic %q", strings.Join(args, " ")))
	}
	return nil
}
