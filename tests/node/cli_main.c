/* Runs cmd_node alone, so tests/node can drive the command before it is in
 * gpufrac's dispatch table. */
int cmd_node(int argc, char **argv);
int main(int argc, char **argv) { return cmd_node(argc, argv); }
