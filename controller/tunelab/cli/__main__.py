from tunelab.cli.main import main

raise SystemExit(main())
