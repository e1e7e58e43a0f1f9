from tunelab.agent.cli import main

raise SystemExit(main())
